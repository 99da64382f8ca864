/* Calls into the attached backend (see backend.h). */
#include "server/http/backend.h"

void backend_cancel(server *s, uint64_t id) {
  pthread_rwlock_rdlock(&s->be_lock);
  if (s->ready)
    s->be.cancel(s->be.ctx, id);
  pthread_rwlock_unlock(&s->be_lock);
}
