// An ordinary server's start-up and file work: what the exec profile must allow.
const fs = require('fs'), os = require('os'), path = require('path'), cp = require('child_process');
const { Worker } = require('worker_threads');
const dir = process.argv[2] || os.tmpdir();
const out = {};
function step(name, fn) { try { fn(); out[name] = 'ok'; } catch (e) { out[name] = e.code || String(e); } }
step('mkdir', () => fs.mkdirSync(path.join(dir, 'a/b'), { recursive: true }));
step('write', () => fs.writeFileSync(path.join(dir, 'a/b/f.json'), '{"x":1}\n'));
step('fsync', () => { const fd = fs.openSync(path.join(dir, 'a/b/f.json'), 'r+'); fs.fsyncSync(fd); fs.fdatasyncSync(fd); fs.closeSync(fd); });
step('rename', () => fs.renameSync(path.join(dir, 'a/b/f.json'), path.join(dir, 'a/b/g.json')));
step('chmod', () => fs.chmodSync(path.join(dir, 'a/b/g.json'), 0o600));
step('utime', () => fs.utimesSync(path.join(dir, 'a/b/g.json'), new Date(), new Date()));
step('copy', () => fs.copyFileSync(path.join(dir, 'a/b/g.json'), path.join(dir, 'a/b/h.json')));
step('readdir', () => fs.readdirSync(path.join(dir, 'a/b')));
step('unlink', () => { fs.unlinkSync(path.join(dir, 'a/b/g.json')); fs.rmSync(path.join(dir, 'a/b/h.json')); });
step('rmdir', () => { fs.rmdirSync(path.join(dir, 'a/b')); fs.rmSync(path.join(dir, 'a'), { recursive: true }); });
step('realpath', () => fs.realpathSync.native(dir));
step('os', () => { os.hostname(); os.totalmem(); os.freemem(); os.uptime(); os.release(); os.homedir(); process.ppid; });
step('hrtime', () => process.hrtime.bigint());
step('crypto', () => require('crypto').randomBytes(16));
step('spawn_refused', () => { const r = cp.spawnSync('/bin/true'); if (!r.error) throw new Error('spawned'); });
const w = new Worker('const {parentPort}=require("worker_threads"); parentPort.postMessage(42)', { eval: true });
w.on('message', (m) => { out.worker = m === 42 ? 'ok' : 'bad'; });
w.on('error', (e) => { out.worker = String(e); });
w.on('exit', async () => {
  try { await fs.promises.writeFile(path.join(dir, 'p.txt'), 'x'); await fs.promises.rm(path.join(dir, 'p.txt')); out.promises = 'ok'; } catch (e) { out.promises = e.code || String(e); }
  setTimeout(() => {
    out.fetch_defined = typeof fetch === 'function' ? 'ok' : typeof fetch;
    // V8 reserves about 10 GiB of address space for WebAssembly memory
    // (undici, inside fetch, uses it): no RLIMIT_AS may stand in the way.
    try { new WebAssembly.Memory({ initial: 1 }); out.wasm = 'ok'; } catch (e) { out.wasm = String(e); }
    console.log(JSON.stringify(out));
  }, 20);
});
