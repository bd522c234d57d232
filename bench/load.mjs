// What else the machine is doing while a benchmark runs (bench/vision.mjs, bench/families.mjs): CPU time from
// /proc, split into this process's tree (node, the browser's processes) and everyone else's, and a wait for
// a quieter machine before a timed run. What others took during a run is reported beside it: the paired
// configurations share the cores with it alike.
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's CPU times. */
const HZ = 100;

/** The machine's busy ticks, this process tree's ticks per pid, and the load averages, now. */
export function cpuSnapshot() {
  const busy = (() => {
    try {
      const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
      return f[0] + f[1] + f[2] + f[5] + f[6] + f[7]; // user nice system irq softirq steal
    } catch {
      return null;
    }
  })();
  const procs = new Map();
  try {
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        procs.set(Number(pid), { ppid: Number(rest[1]), ticks: Number(rest[11]) + Number(rest[12]) });
      } catch { /* gone */ }
    }
  } catch { /* no /proc */ }
  const ours = new Map();
  const isOurs = (pid) => {
    for (let p = pid, n = 0; p > 1 && n < 64; p = procs.get(p)?.ppid ?? 0, n++) if (p === process.pid) return true;
    return false;
  };
  for (const [pid, p] of procs) if (isOurs(pid)) ours.set(pid, p.ticks);
  let load = null;
  try {
    load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
  } catch { /* no /proc */ }
  return { busy, ours, at: Date.now(), load };
}

/** The CPU seconds this process tree and the others took since snapshot `a`, and the wall time. */
export function cpuSince(a) {
  const b = cpuSnapshot();
  let ours = 0;
  for (const [pid, t] of b.ours) ours += t - (a.ours.get(pid) ?? 0);
  const wall = (b.at - a.at) / 1000;
  const all = b.busy !== null && a.busy !== null ? b.busy - a.busy : null;
  return {
    wall_s: wall, cpu_s_this_bench: ours / HZ, cpu_s_others: all === null ? null : Math.max(0, (all - ours) / HZ),
    loadavg_before: a.load, loadavg_after: b.load,
  };
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/**
 * Waits (up to `wait` s; none when `wait` ≤ 0, which returns null) until the others use less than `cores` cores
 * over 5 s; says how long it took and whether the machine got that quiet. `label` names the wait in the log.
 */
export async function quiet(label, { wait, cores }) {
  if (wait <= 0) return null;
  const t0 = Date.now();
  for (;;) {
    const a = cpuSnapshot();
    await sleep(5000);
    const c = cpuSince(a);
    const others = c.cpu_s_others / c.wall_s;
    const waited = (Date.now() - t0) / 1000;
    if (others < cores || waited >= wait) {
      if (waited > 6) console.error(`${label}: waited ${waited.toFixed(0)} s for a quieter machine (others now ${others.toFixed(2)} cores)`);
      return { waited_s: waited, others_cores_before: others, quiet: others < cores };
    }
  }
}
