/* An intrusive doubly linked LRU list: embed an lru_node as the FIRST member of an entry, so a node
 * pointer converts back to its entry. head = most recently used, tail = next to evict. */
#ifndef QVL_BASE_LRU_H
#define QVL_BASE_LRU_H

#include <stddef.h>

typedef struct lru_node {
  struct lru_node *prev, *next;
} lru_node;

typedef struct lru_list {
  lru_node *head, *tail;
} lru_list;

static inline void lru_unlink(lru_list *l, lru_node *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    l->head = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    l->tail = n->prev;
  n->prev = n->next = NULL;
}

static inline void lru_push_front(lru_list *l, lru_node *n) {
  n->prev = NULL;
  n->next = l->head;
  if (l->head)
    l->head->prev = n;
  l->head = n;
  if (!l->tail)
    l->tail = n;
}

/* Places n (not in the list) right behind `after` (in the list), or at the front if after is NULL. */
static inline void lru_insert_after(lru_list *l, lru_node *after, lru_node *n) {
  if (!after) {
    lru_push_front(l, n);
    return;
  }
  n->prev = after;
  n->next = after->next;
  if (after->next)
    after->next->prev = n;
  else
    l->tail = n;
  after->next = n;
}

#endif
