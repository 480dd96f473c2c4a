/** Test helpers: a controllable clock and protocol message builders. */
import { Clock } from '../src/throttle';

/** A clock the test moves by hand; timers fire when `advance` passes them. */
export class ManualClock implements Clock {
  time = 1_700_000_000_000;
  private _timers: { at: number; fn: () => void; id: number }[] = [];
  private _nextId = 1;

  now(): number {
    return this.time;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this._nextId++;
    this._timers.push({ at: this.time + ms, fn, id });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this._timers = this._timers.filter(t => t.id !== handle);
  }

  advance(ms: number): void {
    const until = this.time + ms;
    for (;;) {
      this._timers.sort((a, b) => a.at - b.at);
      const next = this._timers[0];
      if (!next || next.at > until) {
        break;
      }
      this._timers.shift();
      this.time = next.at;
      next.fn();
    }
    this.time = until;
  }

  /** kernel-style Unix seconds for the current time */
  get seconds(): number {
    return this.time / 1000;
  }
}

export function snapshot(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    time: 1_700_000_000,
    compiles: { uncached: 2, cached: 40, seconds_total: 1.93, seconds_last: 0.81 },
    executions: { count: 42, seconds_total: 0.35 },
    transfers: { to_device: 12, from_device: 3, bytes_to_device: 4096, bytes_from_device: 12 },
    fallbacks: { 'aten::nonzero': 3 },
    counters: { UncachedCompile: 2 },
    metrics: {},
    ...overrides
  };
}

export function location(
  line: number,
  count: number,
  cellId: string | null = 'cell-a'
): Record<string, unknown> {
  return {
    file: '/tmp/ipykernel_1/2381.py',
    line,
    function: '<module>',
    label: `cell [${count}], line ${line}`,
    cell: { execution_count: count, cell_id: cellId }
  };
}

export function warning(id: number, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id,
    category: 'recompile',
    cell: { execution_count: 7, cell_id: 'cell-a' },
    title: "Recompiled: an input's shape changed",
    message: 'data: f32[64,1,28,28] → f32[63,1,28,28]',
    where: location(4, 7),
    frames: [location(4, 7)],
    count: 1,
    graph_hash: '3fa2c0ffee',
    ...overrides
  };
}

export function hello(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    v: 1,
    type: 'hello',
    xlalab: '0.1.0',
    pid: 1234,
    platform: 'cpu',
    devices: ['xla:0'],
    settings: {},
    snapshot: snapshot(),
    warnings: [],
    ...overrides
  };
}

export function update(
  seq: number,
  events: unknown[] = [],
  overrides: Record<string, unknown> = {}
): Record<string, unknown> {
  return {
    v: 1,
    type: 'update',
    seq,
    time: 1_700_000_000,
    snapshot: snapshot(),
    events,
    dropped: 0,
    ...overrides
  };
}
