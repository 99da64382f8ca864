// Scale-out end to end (issue 14, and issue 10's job ownership): two qvl replicas behind the real
// nginx running the shipped deploy/nginx/qvl.conf (ports rewritten), on loopback only. nginx runs
// as a non-daemon child with its own prefix, pid, logs and temp dirs in a mktemp directory.
//   - affinity: a two-turn image conversation with one session key stays on one replica, and its
//     second turn is a prefix-cache and an image-cache hit there (that replica's /metrics)
//   - SSE through the proxy arrives token by token
//   - SIGKILL of a replica: new requests go to the other one, no client-visible failure
//   - a rolling restart (SIGTERM, start again) under a steady load loses no request
//   - a job's result is still readable through the balancer after its replica restarted (SQLite)
//   - jobs belong to the API key that made them; DELETE frees a finished job; GET /v1/jobs lists
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  root, QVL, MODEL, MMPROJ, check, sleep, withTimeout, startServer, curl, postJson, errorOf, metrics, userMsg, test, runSuite,
} from "./lib.mjs";

const NGINX = ["/usr/sbin/nginx", "/usr/bin/nginx"].find((p) => existsSync(p)) || "nginx";
const HAPROXY = ["/usr/sbin/haproxy", "/usr/bin/haproxy"].find((p) => existsSync(p)) || "haproxy";
const dir = mkdtempSync(join(tmpdir(), "qvl-scale-"));
chmodSync(dir, 0o755); // nginx's workers may run as another user and need the temp dirs

function freePort(port = 0) {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(port, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); });
  });
}

// Two consecutive free ports (replicas.sh listens on BASE_PORT + i): the port after a free one may
// belong to a server of this suite that is still running.
async function freePortPair() {
  for (let tries = 0; tries < 50; tries++) {
    const p = await freePort();
    if (await freePort(p + 1).then(() => true, () => false)) return [p, p + 1];
  }
  throw new Error("no two consecutive free ports");
}

// ---- replicas ---------------------------------------------------------------------------------

const R = {}; // name -> {name, port, db, srv}
async function startReplica(name) {
  const r = R[name];
  r.srv = await startServer(["--port", String(r.port), "--replica-id", name, "--jobs-db", r.db, "--max-tokens", "64"]);
  return r;
}

const okCount = async (r) => (await metrics(r.srv))['qvl_requests_total{result="ok"}'] || 0;

// ---- nginx ------------------------------------------------------------------------------------

let nginx = null, nginxLog = "", NG = "";
function nginxConf(listen) {
  let conf = readFileSync(join(root, "deploy/nginx/qvl.conf"), "utf8");
  conf = conf.replaceAll("127.0.0.1:8081", `127.0.0.1:${R.r1.port}`).replaceAll("127.0.0.1:8082", `127.0.0.1:${R.r2.port}`)
    .replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${listen};`);
  writeFileSync(join(dir, "qvl.conf"), conf);
  const t = (n) => { mkdirSync(join(dir, n), { recursive: true }); chmodSync(join(dir, n), 0o777); return join(dir, n); };
  writeFileSync(join(dir, "nginx.conf"), `worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 512; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${t("body")};
  proxy_temp_path ${t("proxy")};
  fastcgi_temp_path ${t("fastcgi")};
  uwsgi_temp_path ${t("uwsgi")};
  scgi_temp_path ${t("scgi")};
  include ${dir}/qvl.conf;
}
`);
}

async function startNginx() {
  const port = await freePort();
  nginxConf(port);
  const args = ["-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf"), "-g", "daemon off;"];
  const t = spawnSync(NGINX, ["-t", ...args.slice(0, 6)], { encoding: "utf8" });
  if (t.status !== 0) throw new Error("nginx -t: " + t.stderr);
  nginx = spawn(NGINX, args, { stdio: ["ignore", "ignore", "pipe"] });
  nginx.stderr.on("data", (d) => (nginxLog += d));
  nginx.exitP = new Promise((r) => nginx.on("exit", (code, sig) => { nginx.exited = { code, sig }; r(nginx.exited); }));
  NG = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  for (;;) {
    try { if ((await fetch(NG + "/livez")).status === 200) break; } catch {}
    if (nginx.exited || Date.now() - t0 > 10000) throw new Error("nginx did not come up: " + nginxLog + readFileSync(join(dir, "error.log"), "utf8"));
    await sleep(50);
  }
}

const via = { base: "" }; // postJson target for nginx
const chat = (session, messages, extra = {}) =>
  postJson(via, "/v1/chat/completions", { messages, max_tokens: 8, temperature: 0, ...extra }, session ? ["-H", `X-Session-Id: ${session}`] : []);

// ---- tests --------------------------------------------------------------------------------------

test("shipped configs pass the balancers' own checks", async () => {
  const t = spawnSync(NGINX, ["-t", "-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf")], { encoding: "utf8" });
  check(t.status === 0, "nginx -t accepts deploy/nginx/qvl.conf", t.stderr);
  if (existsSync(HAPROXY) || spawnSync("sh", ["-c", "command -v haproxy"]).status === 0) {
    const h = spawnSync(HAPROXY, ["-c", "-f", join(root, "deploy/haproxy/qvl.cfg")], { encoding: "utf8" });
    check(h.status === 0, "haproxy -c accepts deploy/haproxy/qvl.cfg", h.stdout + h.stderr);
  } else {
    check(false, "haproxy is installed (tools/install-deps.sh --test)");
  }
});

test("health for balancers: /livez and /health", async () => {
  const l = await curl([`${R.r1.srv.base}/livez`]);
  check(l.status === 200 && JSON.parse(l.body).status === "alive" && JSON.parse(l.body).ready === true, "/livez 200 alive, ready", l);
  const h = await curl([`${R.r1.srv.base}/health`]);
  check(h.status === 200, "/health 200 when ready", h);
  const p = await curl(["-X", "POST", `${R.r1.srv.base}/livez`]);
  check(p.status === 405, "POST /livez: 405", p.status);
});

test("affinity: one session stays on one replica, its second turn hits both caches there", async () => {
  const session = "conv-" + Math.random().toString(36).slice(2);
  const before = { r1: await metrics(R.r1.srv), r2: await metrics(R.r2.srv) };
  const turn1 = [userMsg("Describe this image in a few words, please.", "scene_64x128.png")];
  const a = await chat(session, turn1);
  check(a.status === 200, "turn 1 through nginx", a);
  check(new RegExp(`^x-qvl-session: ${session}\\r?$`, "mi").test(a.headers), "X-Qvl-Session echoes the session key", a.headers);
  const answer = JSON.parse(a.body).choices[0].message.content;
  const mid = { r1: await metrics(R.r1.srv), r2: await metrics(R.r2.srv) };
  const ok = (m) => m['qvl_requests_total{result="ok"}'] || 0;
  const owner = ok(mid.r1) > ok(before.r1) ? "r1" : "r2";
  const other = owner === "r1" ? "r2" : "r1";
  check(ok(mid[owner]) === ok(before[owner]) + 1 && ok(mid[other]) === ok(before[other]), "turn 1 served by one replica", { owner });
  // turn 2 shows the image again: the history is a prefix-cache hit, the new image an image-cache hit
  const turn2 = [...turn1, { role: "assistant", content: answer }, userMsg("Same picture again: and the colors?", "scene_64x128.png")];
  const b = await chat(session, turn2);
  check(b.status === 200, "turn 2 through nginx", b);
  const after = { r1: await metrics(R.r1.srv), r2: await metrics(R.r2.srv) };
  check(ok(after[owner]) === ok(mid[owner]) + 1 && ok(after[other]) === ok(mid[other]), "turn 2 on the same replica", { owner });
  const d = (name) => after[owner][name] - mid[owner][name];
  check(d("qvl_prefix_cache_hits_total") >= 1, "turn 2: a prefix-cache hit on that replica", d("qvl_prefix_cache_hits_total"));
  check(d("qvl_image_cache_hits_total") >= 1 && d("qvl_image_cache_misses_total") === 0,
    "turn 2: an image-cache hit on that replica, no miss", { hits: d("qvl_image_cache_hits_total"), timings: JSON.parse(b.body).timings });
  // without a key, qvl's own key is the first turn's hash: the same for both turns
  const k1 = /^x-qvl-session: (\S+)/mi.exec((await chat(null, turn1)).headers)?.[1];
  const k2 = /^x-qvl-session: (\S+)/mi.exec((await chat(null, turn2)).headers)?.[1];
  check(k1 && k1.startsWith("c-") && k1 === k2, "no session header: X-Qvl-Session is the first turn's hash, equal across turns", [k1, k2]);
  // many sessions spread over both replicas (16 keys all on one replica: p = 2^-15)
  const s0 = { r1: await okCount(R.r1), r2: await okCount(R.r2) };
  for (let i = 0; i < 16; i++) await chat("spread-" + i, [{ role: "user", content: "hi " + i }], { max_tokens: 1 });
  const s1 = { r1: await okCount(R.r1), r2: await okCount(R.r2) };
  check(s1.r1 > s0.r1 && s1.r2 > s0.r2 && s1.r1 - s0.r1 + s1.r2 - s0.r2 === 16, "16 sessions use both replicas", [s0, s1]);
}, 120000);

test("streaming through nginx arrives token by token", async () => {
  const res = await fetch(NG + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Session-Id": "stream-1" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Tell a long story." }], max_tokens: 64, temperature: 1, seed: 3, stream: true }),
  });
  check(res.status === 200 && /text\/event-stream/.test(res.headers.get("content-type")), "SSE through nginx", res.status);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = "", reads = 0, tFirst = 0, tLast = 0, firstContentAt = -1;
  const t0 = performance.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    reads++;
    const now = performance.now() - t0;
    text += dec.decode(value, { stream: true });
    if (firstContentAt < 0 && /"content":"[^"]/.test(text)) { firstContentAt = now; tFirst = now; }
    tLast = now;
  }
  const events = text.split("\n\n").filter((e) => e.startsWith("data: ")).length;
  check(text.endsWith("data: [DONE]\n\n") && events >= 3, "complete event stream", text.slice(-200));
  // nginx buffering would hand the whole stream over in one piece, at the end
  check(reads >= 3, "the stream came in several reads, not one buffered block", { reads, events });
  check(firstContentAt >= 0 && tFirst < tLast, "the first token arrived before the last", { tFirst, tLast });
}, 60000);

test("SIGKILL of a replica: new requests go to the other, none fails", async () => {
  R.r2.srv.proc.kill("SIGKILL");
  await R.r2.srv.exit;
  const results = [];
  for (let i = 0; i < 12; i++) results.push(await chat("kill-" + i, [{ role: "user", content: "after the crash " + i }], { max_tokens: 2 }));
  const bad = results.filter((r) => r.status !== 200);
  check(bad.length === 0, "12 requests after the SIGKILL: all 200 (retried on the live replica)", bad.map((r) => r.status + " " + r.body.slice(0, 120)));
  await startReplica("r2");
  // nginx takes the replica back after fail_timeout (5 s): wait until it serves again
  const t0 = Date.now();
  let back = false;
  while (!back && Date.now() - t0 < 20000) {
    const c0 = await okCount(R.r2);
    await Promise.all([0, 1, 2, 3].map((i) => chat("back-" + i + "-" + Date.now(), [{ role: "user", content: "x" }], { max_tokens: 1 })));
    back = (await okCount(R.r2)) > c0;
    if (!back) await sleep(500);
  }
  check(back, "the restarted replica gets traffic again");
}, 90000);

test("rolling restart under a steady load loses no request", async () => {
  let stop = false, sent = 0;
  const failures = [];
  const worker = async (w) => {
    for (let i = 0; !stop; i++) {
      const r = await chat(`roll-${w}-${i % 7}`, [{ role: "user", content: `load ${w} ${i}` }], { max_tokens: 4 });
      sent++;
      if (r.status !== 200) failures.push(r.status + " " + r.body.slice(0, 160));
    }
  };
  const load = [0, 1, 2].map(worker);
  for (const name of ["r1", "r2"]) {
    await sleep(500);
    const st = await R[name].srv.stop(); // SIGTERM: drain, exit 0
    check(st.code === 0, `${name} drained and exited 0`, st);
    await startReplica(name);
    const t0 = Date.now();
    let back = false;
    while (!back && Date.now() - t0 < 20000) {
      const c0 = await okCount(R[name]);
      await sleep(700);
      back = (await okCount(R[name])) > c0;
    }
    check(back, `${name} serves again after its restart`);
  }
  stop = true;
  await Promise.all(load);
  check(sent >= 20, "a steady load ran through the restarts", sent);
  check(failures.length === 0, `no request lost (${sent} sent)`, failures.slice(0, 5));
}, 180000);

test("a job's result is read through nginx after its replica restarted", async () => {
  const r = await postJson(via, "/v1/jobs", { messages: [{ role: "user", content: "A job to keep." }], max_tokens: 6, temperature: 0 }, ["-H", "X-Session-Id: job-session"]);
  check(r.status === 202, "job accepted through nginx", r);
  const id = JSON.parse(r.body).id;
  const m = /^job-(r[12])-[0-9a-f]{24}$/.exec(id);
  check(!!m, "the job id names its replica", id);
  if (!m) return;
  const owner = m[1];
  let job;
  const t0 = Date.now();
  do {
    await sleep(50);
    job = JSON.parse((await curl([`${NG}/v1/jobs/${id}`])).body);
  } while (["queued", "running"].includes(job.status) && Date.now() - t0 < 20000);
  check(job.status === "done", "job done", job);
  // the other replica does not have it: nginx must route by the id, not by the session
  const other = owner === "r1" ? "r2" : "r1";
  check((await curl([`${R[other].srv.base}/v1/jobs/${id}`])).status === 404, "only the owning replica has the job");
  const st = await R[owner].srv.stop();
  check(st.code === 0, "owner stopped cleanly", st);
  await startReplica(owner);
  const again = await curl([`${NG}/v1/jobs/${id}`]);
  const j2 = again.status === 200 ? JSON.parse(again.body) : null;
  check(j2 && j2.status === "done" && JSON.stringify(j2.result) === JSON.stringify(job.result), "after the restart: the same result, through nginx", again);
  const list = JSON.parse((await curl([`${R[owner].srv.base}/v1/jobs`])).body);
  check(list.object === "list" && list.data.some((x) => x.id === id), "GET /v1/jobs on the owner lists it", list);
}, 90000);

test("jobs pending when their replica was killed read failed, job_interrupted, after its restart", async () => {
  const owner = R.r1;
  const ids = [];
  // more jobs than batch slots, so that some are still queued or running at the kill
  for (let i = 0; i < 24; i++) {
    const r = await postJson(owner.srv, "/v1/jobs", { messages: [{ role: "user", content: "long job " + i }], max_tokens: 64, temperature: 1 });
    if (r.status === 202) ids.push(JSON.parse(r.body).id);
  }
  owner.srv.proc.kill("SIGKILL");
  await owner.srv.exit;
  await startReplica("r1");
  const jobs = await Promise.all(ids.map(async (id) => JSON.parse((await curl([`${owner.srv.base}/v1/jobs/${id}`])).body)));
  const interrupted = jobs.filter((j) => j.status === "failed" && j.error?.code === "job_interrupted").length;
  const done = jobs.filter((j) => j.status === "done").length;
  check(ids.length === 24 && done + interrupted === ids.length, "every job is done or failed with job_interrupted", jobs.map((j) => j.status));
  check(interrupted > 0, "the jobs cut off by the kill say so (job_interrupted)", { done, interrupted });
}, 60000);

test("the shipped HAProxy config: affinity (header and user), SSE, failover, job routing", async () => {
  const port = await freePort();
  let cfg = readFileSync(join(root, "deploy/haproxy/qvl.cfg"), "utf8");
  cfg = cfg.replaceAll("127.0.0.1:8081", `127.0.0.1:${R.r1.port}`).replaceAll("127.0.0.1:8082", `127.0.0.1:${R.r2.port}`)
    .replace("bind 127.0.0.1:8080", `bind 127.0.0.1:${port}`);
  const f = join(dir, "haproxy.cfg");
  writeFileSync(f, cfg);
  const hp = spawn(HAPROXY, ["-db", "-f", f], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  hp.stderr.on("data", (d) => (log += d));
  const exit = new Promise((r) => hp.on("exit", (code, sig) => r({ code, sig })));
  const H = { base: `http://127.0.0.1:${port}` };
  try {
    const t0 = Date.now();
    for (;;) {
      try { if ((await fetch(H.base + "/livez")).status === 200) break; } catch {}
      if (Date.now() - t0 > 10000) throw new Error("haproxy did not come up: " + log);
      await sleep(50);
    }
    const served = async (fn) => {
      const a = { r1: await okCount(R.r1), r2: await okCount(R.r2) };
      const r = await fn();
      const b = { r1: await okCount(R.r1), r2: await okCount(R.r2) };
      return { r, on: b.r1 > a.r1 ? "r1" : b.r2 > a.r2 ? "r2" : null };
    };
    const msg = (t) => ({ messages: [{ role: "user", content: t }], max_tokens: 2, temperature: 0 });
    const ons = [];
    for (let i = 0; i < 4; i++) ons.push((await served(() => postJson(H, "/v1/chat/completions", msg("turn " + i), ["-H", "X-Session-Id: hap-1"]))).on);
    check(ons[0] && ons.every((o) => o === ons[0]), "one X-Session-Id: one replica", ons);
    const uons = [];
    let last;
    for (let i = 0; i < 4; i++) {
      const x = await served(() => postJson(H, "/v1/chat/completions", { ...msg("user turn " + i), user: "alice" }));
      uons.push(x.on);
      last = x.r;
    }
    check(uons[0] && uons.every((o) => o === uons[0]), "one `user` field, no header: one replica", uons);
    check(/^x-qvl-session: u-[0-9a-f]{16}\r?$/mi.test(last.headers), "X-Qvl-Session is the user's hash", last.headers);
    const spread = new Set();
    for (let i = 0; i < 16; i++) spread.add((await served(() => postJson(H, "/v1/chat/completions", msg("s"), ["-H", `X-Session-Id: hs-${i}`]))).on);
    check(spread.has("r1") && spread.has("r2"), "16 sessions use both replicas", [...spread]);
    const st = await curl(["-N", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@-", H.base + "/v1/chat/completions"],
      JSON.stringify({ messages: [{ role: "user", content: "story" }], max_tokens: 16, stream: true }));
    check(st.status === 200 && st.body.endsWith("data: [DONE]\n\n"), "SSE through HAProxy", st.body.slice(-120));
    const j = await postJson(H, "/v1/jobs", msg("hap job"), ["-H", "X-Session-Id: hap-job"]);
    const id = JSON.parse(j.body).id;
    let job;
    const t1 = Date.now();
    do { await sleep(50); job = JSON.parse((await curl([`${H.base}/v1/jobs/${id}`])).body); } while (["queued", "running"].includes(job.status) && Date.now() - t1 < 20000);
    check(job.status === "done", "a job read back through HAProxy (routed by its id)", job);
    R.r2.srv.proc.kill("SIGKILL");
    await R.r2.srv.exit;
    const res = [];
    for (let i = 0; i < 8; i++) res.push(await postJson(H, "/v1/chat/completions", msg("after kill"), ["-H", `X-Session-Id: hk-${i}`]));
    check(res.every((r) => r.status === 200), "SIGKILL of a replica: 8 requests through HAProxy all 200", res.map((r) => r.status));
    await startReplica("r2");
  } finally {
    hp.kill("SIGUSR1"); // soft stop
    await withTimeout(exit, 10000, "haproxy stop").catch(() => { hp.kill("SIGKILL"); return exit; });
  }
}, 120000);

test("jobs belong to their API key; DELETE frees a finished job; GET /v1/jobs lists the caller's", async () => {
  const s = await startServer(["--api-key", "key-a", "--api-key", "key-b", "--max-jobs", "3"]);
  try {
    const A = ["-H", "Authorization: Bearer key-a"], B = ["-H", "Authorization: Bearer key-b"];
    const body = { messages: [{ role: "user", content: "owned" }], max_tokens: 2, temperature: 0 };
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(JSON.parse((await postJson(s, "/v1/jobs", body, A)).body).id);
    const t0 = Date.now();
    for (const id of ids) {
      let st;
      do { st = JSON.parse((await curl([...A, `${s.base}/v1/jobs/${id}`])).body).status; await sleep(20); } while (["queued", "running"].includes(st) && Date.now() - t0 < 20000);
    }
    let r = await curl([...B, `${s.base}/v1/jobs/${ids[0]}`]);
    check(r.status === 404 && errorOf(r)?.code === "job_not_found", "key b reading key a's job: 404", r);
    r = await curl([...B, "-X", "DELETE", `${s.base}/v1/jobs/${ids[0]}`]);
    check(r.status === 404, "key b deleting key a's job: 404", r);
    r = await curl([...A, `${s.base}/v1/jobs/${ids[0]}`]);
    check(r.status === 200 && JSON.parse(r.body).status === "done", "still there for key a", r);
    const la = JSON.parse((await curl([...A, `${s.base}/v1/jobs`])).body);
    const lb = JSON.parse((await curl([...B, `${s.base}/v1/jobs`])).body);
    check(la.object === "list" && la.data.length === 3 && la.data[0].id === ids[2] && !la.data[0].result, "key a lists its 3 jobs, newest first, no results", la);
    check(lb.object === "list" && lb.data.length === 0, "key b lists none", lb);
    const page = JSON.parse((await curl([...A, `${s.base}/v1/jobs?limit=2`])).body);
    const next = JSON.parse((await curl([...A, `${s.base}/v1/jobs?limit=2&after=${page.data[1]?.id}`])).body);
    check(page.data.length === 2 && page.has_more === true && next.data.length === 1 && next.data[0].id === ids[0] && next.has_more === false, "pages with limit and after", [page, next]);
    r = await curl([...A, `${s.base}/v1/jobs?limit=0`]);
    check(r.status === 400, "limit=0: 400", r.status);
    // the store is full (--max-jobs 3): a new job is refused until one is deleted
    r = await postJson(s, "/v1/jobs", body, B);
    check(r.status === 503, "full store: 503", r);
    r = await curl([...A, "-X", "DELETE", `${s.base}/v1/jobs/${ids[0]}`]);
    check(r.status === 200 && JSON.parse(r.body).deleted === true, "key a deletes its finished job", r);
    r = await curl([...A, `${s.base}/v1/jobs/${ids[0]}`]);
    check(r.status === 404, "deleted: 404 at once", r.status);
    const m = await metrics(s);
    check(m.qvl_jobs_stored === 2, "the store freed it (qvl_jobs_stored 2)", m.qvl_jobs_stored);
    r = await postJson(s, "/v1/jobs", body, B);
    check(r.status === 202, "room for key b's job right after the DELETE", r);
  } finally {
    await s.stop();
  }
}, 90000);

test("deploy/local/replicas.sh: N replicas pinned to disjoint cores, drained together", async () => {
  const ports = await freePortPair();
  const ncpu = (await import("node:os")).cpus().length;
  const cores = ncpu >= 2 ? "0-1" : "0";
  const n = ncpu >= 2 ? 2 : 1;
  const p = spawn(join(root, "deploy/local/replicas.sh"), [String(n), MODEL, MMPROJ, "--max-tokens", "4"], {
    env: { ...process.env, QVL, BASE_PORT: String(ports[0]), CORES: cores, KV_CACHE_MB: "256", STATE_DIR: join(dir, "local") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "", err = "";
  p.stdout.on("data", (d) => (out += d));
  p.stderr.on("data", (d) => (err += d));
  const exit = new Promise((r) => p.on("exit", (code, sig) => r({ code, sig })));
  // the replicas' own messages, not their request log lines, say why one is not up or not drained
  const said = () => err.split("\n").filter((l) => !/msg=request/.test(l)).slice(-20).join("\n");
  try {
    const t0 = Date.now();
    let up = 0;
    while (up < n && Date.now() - t0 < 30000) {
      up = 0;
      for (let i = 0; i < n; i++) try { if ((await fetch(`http://127.0.0.1:${ports[0] + i}/health`)).status === 200) up++; } catch {}
      if (up < n) await sleep(100);
    }
    check(up === n, `${n} replicas ready`, said());
    const lines = [...out.matchAll(/^replica (r\d+) pid (\d+) port (\d+) cores (\S+)$/gm)];
    check(lines.length === n, "one line per replica", out);
    const sets = lines.map((m) => readFileSync(`/proc/${m[2]}/status`, "utf8").match(/^Cpus_allowed_list:\s*(\S+)/m)[1]);
    check(sets.every((c, i) => c === lines[i][4]) && new Set(sets).size === n, "each replica runs on its own cores", sets);
    const r = await postJson({ base: `http://127.0.0.1:${ports[0]}` }, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
    check(r.status === 200, "a pinned replica answers", r.status);
  } finally {
    p.kill("SIGTERM");
    const st = await withTimeout(exit, 20000, "replicas.sh stop").catch(() => { p.kill("SIGKILL"); return { code: -1 }; });
    check(st.code === 0, "SIGTERM drains every replica, the script exits 0", JSON.stringify(st) + "\n" + said());
  }
}, 60000);

await runSuite("e2e-scale", {
  setup: async () => {
    for (const name of ["r1", "r2"]) R[name] = { name, port: await freePort(), db: join(dir, `${name}.db`) };
    await Promise.all([startReplica("r1"), startReplica("r2")]);
    await startNginx();
    via.base = NG;
    return {};
  },
  alive: () => (nginx && !nginx.exited) || `nginx died (${JSON.stringify(nginx?.exited)}): ${nginxLog}`,
  teardown: async () => {
    if (nginx && !nginx.exited) {
      nginx.kill("SIGQUIT"); // graceful stop
      try { await withTimeout(nginx.exitP, 10000, "nginx stop"); } catch { nginx.kill("SIGKILL"); await nginx.exitP; }
    }
    for (const r of Object.values(R)) if (r.srv && !r.srv.exited()) await r.srv.stop();
    if (!nginx || nginx.exited) {
      // nothing of ours may be left listening
      check(!existsSync(join(dir, "nginx.pid")), "nginx removed its pid file on exit");
    }
    rmSync(dir, { recursive: true, force: true });
  },
});
