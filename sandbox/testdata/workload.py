"""An ordinary server's start-up and file work: what the exec profile must allow."""
import asyncio, fcntl, json, os, platform, shutil, socket, subprocess, sys, tempfile, threading, time, signal, sqlite3, select
d = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
out = {}
def step(name, fn):
    try:
        fn(); out[name] = "ok"
    except Exception as e:
        out[name] = getattr(e, "errno", None) and __import__("errno").errorcode.get(e.errno, str(e)) or repr(e)
p = lambda *a: os.path.join(d, *a)
step("mkdir", lambda: (os.mkdir(p("a")), os.makedirs(p("a", "b"))))
def write():
    with open(p("a", "b", "f.json"), "w") as f:
        f.write("{}"); f.flush(); os.fsync(f.fileno()); os.fdatasync(f.fileno())
step("write", write)
def lock():
    with open(p("a", "lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX); fcntl.flock(f, fcntl.LOCK_UN); fcntl.lockf(f, fcntl.LOCK_EX); fcntl.lockf(f, fcntl.LOCK_UN)
step("lock", lock)
step("rename", lambda: os.rename(p("a", "b", "f.json"), p("a", "b", "g.json")))
step("replace", lambda: os.replace(p("a", "b", "g.json"), p("a", "b", "h.json")))
step("chmod", lambda: os.chmod(p("a", "b", "h.json"), 0o600))
step("utime", lambda: os.utime(p("a", "b", "h.json")))
step("copy", lambda: shutil.copy2(p("a", "b", "h.json"), p("a", "b", "i.json")))
step("listdir", lambda: (os.listdir(p("a")), list(os.scandir(p("a")))))
step("unlink", lambda: (os.unlink(p("a", "b", "h.json")), os.remove(p("a", "b", "i.json"))))
step("rmdir", lambda: (os.rmdir(p("a", "b")), shutil.rmtree(p("a"))))
step("tempfile", lambda: tempfile.NamedTemporaryFile().close())
step("sqlite", lambda: (lambda c: (c.execute("create table t(x)"), c.execute("insert into t values(1)"), c.commit(), c.close()))(sqlite3.connect(p("db.sqlite"))))
step("pipe", lambda: [os.close(x) for x in os.pipe()])
step("uname", lambda: (platform.uname(), os.uname(), os.getppid(), os.cpu_count()))
step("sysinfo", lambda: os.sysconf("SC_PHYS_PAGES"))
def thread():
    r = []
    t = threading.Thread(target=lambda: r.append(1)); t.start(); t.join()
    assert r == [1]
step("thread", thread)
def sig():
    got = []
    signal.signal(signal.SIGUSR1, lambda *a: got.append(1)); os.kill(os.getpid(), signal.SIGUSR1); assert got
step("signal", sig)
step("select", lambda: select.select([], [], [], 0))
async def co():
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, time.sleep, 0.01)
step("asyncio", lambda: asyncio.run(co()))
step("random", lambda: os.urandom(16))
def spawn():
    try:
        subprocess.run(["/bin/true"], check=True)
    except OSError:
        return
    raise RuntimeError("spawned")
step("spawn_refused", spawn)
print(json.dumps(out), flush=True)
