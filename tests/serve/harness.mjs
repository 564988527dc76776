// Shared by the serve tests: starting `deltafin serve` on a free loopback port, and running
// `deltafin run` for the text (and the receipt's ids hash) a request must match.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

// Starts the server; resolves to { url, pid, log(), stop() } once it prints its address.
export function startServer(binary, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ["serve", "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
    const exited = new Promise((done) => proc.on("exit", (code) => done(code)));
    let log = "";
    let started = false;
    proc.stderr.on("data", (data) => {
      log += data;
      const match = log.match(/on (http:\/\/[0-9.]+:[0-9]+)/);
      if (match && !started) {
        started = true;
        resolve({ url: match[1], pid: proc.pid, log: () => log, stop: () => (proc.kill("SIGTERM"), exited) });
      }
    });
    exited.then((code) => { if (!started) reject(new Error(`server exited ${code}: ${log}`)); });
  });
}

// `deltafin run ARGS --stats=full`: the text it printed (less its final newline), the receipt's ids
// hash and the number of ids. `run` drops one trailing newline from every prompt (docs/usage.md) while
// the API takes a prompt as sent, so -p TEXT is passed as TEXT + "\n".
export function runCli(binary, args) {
  const argv = args.map((a, i) => (i > 0 && args[i - 1] === "-p" ? a + "\n" : a));
  const r = spawnSync(binary, ["run", ...argv, "--stats=full"], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`deltafin run ${args.join(" ")}: exit ${r.status}: ${r.stderr}`);
  const match = r.stderr.match(/ids hash  (xxh3:[0-9a-f]{16}) \((\d+) ids\)/);
  if (!match) throw new Error(`no ids hash in the receipt: ${r.stderr}`);
  return { text: r.stdout.replace(/\n$/, ""), hash: match[1], ids: Number(match[2]) };
}

// A process's resident memory in bytes (Linux /proc): { now, peak }, null where unknown.
export function residentBytes(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (field) => Number(status.match(new RegExp(`${field}:\\s+(\\d+) kB`))[1]) * 1024;
    return { now: kb("VmRSS"), peak: kb("VmHWM") };
  } catch {
    return null;
  }
}
