import { beforeEach, describe, expect, it } from 'vitest';

import { KernelModel, MAX_TIMELINE_EVENTS } from '../src/model';
import { ManualClock, hello, location, snapshot, update, warning } from './helpers';

describe('KernelModel state machine', () => {
  let clock: ManualClock;
  let model: KernelModel;

  beforeEach(() => {
    clock = new ManualClock();
    model = new KernelModel({ clock, notifyIntervalMs: 100 });
  });

  it('starts probing and becomes connected on hello', () => {
    expect(model.status).toBe('probing');
    expect(model.handleMessage(hello({ warnings: [warning(1)] }))).toBe(true);
    expect(model.status).toBe('connected');
    expect(model.hello?.xlalab).toBe('0.1.0');
    expect(model.hello?.devices).toEqual(['xla:0']);
    expect(model.snapshot.compiles.uncached).toBe(2);
    expect(model.snapshot.compiles.seconds_last).toBeCloseTo(0.81);
    expect(model.warningList().map(w => w.id)).toEqual([1]);
  });

  it('says not enabled when the kernel closes the probe, and comes back on a later hello', () => {
    model.setNotEnabled();
    expect(model.status).toBe('not-enabled');
    model.handleMessage(hello());
    expect(model.status).toBe('connected');
  });

  it('ignores updates before a hello', () => {
    expect(model.handleMessage(update(1))).toBe(false);
    expect(model.status).toBe('probing');
  });

  it('applies updates: snapshot replaced, events kept, warnings upserted by id', () => {
    model.handleMessage(hello({ warnings: [warning(1)] }));
    const next = snapshot({ compiles: { uncached: 3, cached: 41, seconds_total: 2.5, seconds_last: 0.57 } });
    model.handleMessage(
      update(
        1,
        [
          {
            kind: 'compile',
            time: 10,
            where: null,
            graph_hash: 'ab',
            num_nodes: 5,
            seconds: 0.57,
            cached: false
          },
          { kind: 'execute', time: 10.1, where: null, graph_hash: 'ab', seconds: 0.01 },
          { kind: 'warning', time: 10.2, where: null, warning: warning(1, { count: 2 }) },
          { kind: 'warning', time: 10.3, where: null, warning: warning(2, { category: 'fallback' }) }
        ],
        { snapshot: next }
      )
    );
    expect(model.snapshot.compiles.uncached).toBe(3);
    expect(model.events.map(e => e.kind)).toEqual(['compile', 'execute']);
    const warnings = model.warningList();
    expect(warnings.map(w => [w.id, w.count])).toEqual([
      [2, 1],
      [1, 2]
    ]);
    expect(warnings[0].category).toBe('fallback');
  });

  it('bumps warningsVersion only when the warning list changes', () => {
    model.handleMessage(hello());
    const v0 = model.warningsVersion;
    model.handleMessage(update(1, [{ kind: 'execute', time: 1, where: null }]));
    expect(model.warningsVersion).toBe(v0);
    model.handleMessage(update(2, [{ kind: 'warning', time: 2, where: null, warning: warning(1) }]));
    expect(model.warningsVersion).toBeGreaterThan(v0);
  });

  it('drops duplicate and stale updates and counts gaps in seq', () => {
    model.handleMessage(hello());
    expect(model.handleMessage(update(1, [{ kind: 'execute', time: 1, where: null }]))).toBe(true);
    expect(model.handleMessage(update(1, [{ kind: 'execute', time: 1, where: null }]))).toBe(false);
    expect(model.events).toHaveLength(1);
    expect(model.handleMessage(update(4))).toBe(true);
    expect(model.missedUpdates).toBe(2);
    expect(model.handleMessage(update(3))).toBe(false);
  });

  it('sums the events the kernel dropped', () => {
    model.handleMessage(hello());
    model.handleMessage(update(1, [], { dropped: 5 }));
    model.handleMessage(update(2, [], { dropped: 7 }));
    expect(model.droppedEvents).toBe(12);
  });

  it('a new hello (reload_ext, another comm) resets everything', () => {
    model.handleMessage(hello());
    model.handleMessage(update(5, [{ kind: 'execute', time: 1, where: null }], { dropped: 1 }));
    const gen = model.generation;
    model.handleMessage(hello({ snapshot: snapshot({ compiles: { uncached: 0, cached: 0 } }) }));
    expect(model.events).toHaveLength(0);
    expect(model.droppedEvents).toBe(0);
    expect(model.snapshot.compiles.uncached).toBe(0);
    expect(model.generation).toBeGreaterThan(gen);
    // seq restarts on the new comm
    expect(model.handleMessage(update(1))).toBe(true);
  });

  it('restart and death forget the old kernel', () => {
    model.handleMessage(hello({ warnings: [warning(1)] }));
    model.setRestarting();
    expect(model.status).toBe('restarting');
    expect(model.warningList()).toHaveLength(0);
    expect(model.snapshot.compiles.uncached).toBe(0);
    model.setProbing();
    expect(model.status).toBe('probing');
    model.setDead();
    expect(model.status).toBe('dead');
  });

  it('bounds the timeline', () => {
    model.handleMessage(hello());
    const events = Array.from({ length: 150 }, (_, i) => ({ kind: 'execute', time: i, where: null }));
    const updates = Math.ceil(MAX_TIMELINE_EVENTS / events.length) + 3;
    for (let seq = 1; seq <= updates; seq++) {
      model.handleMessage(update(seq, events));
    }
    expect(model.events).toHaveLength(MAX_TIMELINE_EVENTS);
  });

  it('ignores unknown message types, unknown event kinds and unknown fields', () => {
    model.handleMessage(hello({ future_field: { x: 1 } }));
    expect(model.handleMessage({ v: 1, type: 'telemetry', x: 1 })).toBe(false);
    expect(model.handleMessage(update(1, [{ kind: 'mystery', time: 1, where: null }, 'junk', null]))).toBe(
      true
    );
    expect(model.events).toHaveLength(0);
    expect(model.status).toBe('connected');
  });

  it('ignores malformed messages', () => {
    for (const junk of [
      null,
      'hello',
      42,
      [],
      {},
      { type: 'hello' },
      { v: '1', type: 'hello' },
      { v: 0, type: 'hello' }
    ]) {
      expect(model.handleMessage(junk)).toBe(false);
    }
    expect(model.status).toBe('probing');
  });

  it('survives wrongly typed fields with defaults', () => {
    model.handleMessage(
      hello({
        snapshot: {
          compiles: { uncached: 'many', cached: null },
          fallbacks: { __proto__x: 'x', 'aten::nonzero': 2 }
        },
        devices: 'xla:0',
        warnings: [{ id: 'x' }, warning(3, { category: 'weird', frames: 'nope' })]
      })
    );
    expect(model.snapshot.compiles.uncached).toBe(0);
    expect(model.hello?.devices).toEqual([]);
    const [w] = model.warningList();
    expect(w.id).toBe(3);
    expect(w.category).toBe('other'); // an unknown kind is shown as such, never as a recompile
    expect(w.frames).toEqual([]);
    expect(model.fallbackList()).toEqual([['aten::nonzero', 2]]);
  });

  it('keeps an op called __proto__ as an ordinary fallback', () => {
    model.handleMessage(
      hello({ snapshot: snapshot({ fallbacks: JSON.parse('{"__proto__": 4, "aten::nonzero": 3}') }) })
    );
    expect(model.fallbackList()).toEqual([
      ['__proto__', 4],
      ['aten::nonzero', 3]
    ]);
    expect(model.fallbackTotal()).toBe(7);
  });
});

describe('protocol version', () => {
  it('shows the mismatch text for a newer protocol and ignores the message', () => {
    const model = new KernelModel({ clock: new ManualClock() });
    expect(model.handleMessage(hello({ v: 2, xlalab: '0.3.0' }))).toBe(false);
    expect(model.status).toBe('mismatch');
    expect(model.mismatchMessage).toBe('xlalab 0.3.0 in the kernel speaks protocol 2; update the extension');
    expect(model.snapshot.compiles.uncached).toBe(0);
  });

  it('uses the known version for a newer update on a v1 connection', () => {
    const model = new KernelModel({ clock: new ManualClock() });
    model.handleMessage(hello());
    model.handleMessage(update(1, [], { v: 3 }));
    expect(model.mismatchMessage).toBe('xlalab 0.1.0 in the kernel speaks protocol 3; update the extension');
    // probing again does not hide the mismatch
    model.setProbing();
    expect(model.status).toBe('mismatch');
  });
});

describe('compile in progress', () => {
  let clock: ManualClock;
  let model: KernelModel;

  beforeEach(() => {
    clock = new ManualClock();
    model = new KernelModel({ clock });
    model.handleMessage(hello({ snapshot: snapshot({ time: clock.seconds }) }));
  });

  const start = (seq: number, hash: string, time: number): void => {
    model.handleMessage(
      update(
        seq,
        [
          {
            kind: 'compile_start',
            time,
            where: location(3, 2),
            graph_hash: hash,
            num_nodes: 120,
            device: 'xla:0',
            reason: 'mark_step'
          }
        ],
        {
          time
        }
      )
    );
  };

  it('runs from compile_start until the matching compile', () => {
    start(1, '3fa2c0ffee', clock.seconds);
    expect(model.compiling?.graphHash).toBe('3fa2c0ffee');
    expect(model.compiling?.numNodes).toBe(120);
    clock.advance(1200);
    expect(model.compilingSeconds()).toBeCloseTo(1.2, 5);
    // another graph's compile does not end it
    model.handleMessage(
      update(2, [
        { kind: 'compile', time: clock.seconds, where: null, graph_hash: 'other', cached: true, seconds: 0 }
      ])
    );
    expect(model.compiling).not.toBeNull();
    model.handleMessage(
      update(3, [
        {
          kind: 'compile',
          time: clock.seconds,
          where: null,
          graph_hash: '3fa2c0ffee',
          cached: false,
          seconds: 1.2
        }
      ])
    );
    expect(model.compiling).toBeNull();
    expect(model.compilingSeconds()).toBeNull();
  });

  it('measures elapsed time on the kernel clock even when the clocks disagree', () => {
    const kernelTime = clock.seconds - 3600; // the kernel's clock is an hour behind
    start(1, 'aa', kernelTime);
    clock.advance(2000);
    expect(model.compilingSeconds()).toBeCloseTo(2, 5);
  });

  it('ends on the matching compile_error', () => {
    start(1, 'aa', clock.seconds);
    model.handleMessage(
      update(2, [
        {
          kind: 'compile_error',
          time: clock.seconds,
          where: null,
          graph_hash: 'aa',
          seconds: 0.1,
          error: 'boom'
        }
      ])
    );
    expect(model.compiling).toBeNull();
  });

  it('ends when the kernel goes idle (the compile raised)', () => {
    start(1, 'aa', clock.seconds);
    model.kernelIdle();
    expect(model.compiling).toBeNull();
  });

  it('ends on restart', () => {
    start(1, 'aa', clock.seconds);
    model.setRestarting();
    expect(model.compiling).toBeNull();
  });
});

describe('change notifications (throttled merges)', () => {
  it('delivers the first change at once and merges a burst into one later call', () => {
    const clock = new ManualClock();
    const model = new KernelModel({ clock, notifyIntervalMs: 100 });
    let calls = 0;
    const seen: number[] = [];
    model.subscribe(() => {
      calls += 1;
      seen.push(model.snapshot.compiles.uncached);
    });
    model.handleMessage(hello());
    expect(calls).toBe(1);
    for (let seq = 1; seq <= 10; seq++) {
      model.handleMessage(
        update(seq, [{ kind: 'execute', time: seq, where: null }], {
          snapshot: snapshot({ compiles: { uncached: seq } })
        })
      );
    }
    expect(calls).toBe(1);
    clock.advance(100);
    expect(calls).toBe(2);
    // the merged call sees the final state of the burst
    expect(seen[1]).toBe(10);
    expect(model.events).toHaveLength(10);
    clock.advance(1000);
    expect(calls).toBe(2);
  });

  it('unsubscribe and dispose stop notifications', () => {
    const clock = new ManualClock();
    const model = new KernelModel({ clock });
    let calls = 0;
    const off = model.subscribe(() => (calls += 1));
    off();
    model.handleMessage(hello());
    expect(calls).toBe(0);
    model.subscribe(() => (calls += 1));
    model.handleMessage(hello());
    model.handleMessage(update(1));
    model.dispose();
    clock.advance(1000);
    expect(calls).toBe(0);
  });
});

describe('clear and snapshot replies', () => {
  it('cleared() drops warnings and events, applySnapshot replaces totals', () => {
    const model = new KernelModel({ clock: new ManualClock() });
    model.handleMessage(hello({ warnings: [warning(1)] }));
    model.handleMessage(update(1, [{ kind: 'execute', time: 1, where: null }]));
    model.cleared();
    expect(model.warningList()).toHaveLength(0);
    expect(model.events).toHaveLength(0);
    model.applySnapshot(snapshot({ compiles: { uncached: 0, cached: 0 }, fallbacks: {} }));
    expect(model.snapshot.compiles.uncached).toBe(0);
    expect(model.fallbackTotal()).toBe(0);
  });

  it('an update that says cleared (another tab asked) drops what was shown', () => {
    const model = new KernelModel({ clock: new ManualClock() });
    model.handleMessage(hello({ warnings: [warning(1)] }));
    model.handleMessage(update(1, [{ kind: 'execute', time: 1, where: null }]));
    expect(model.warningList()).toHaveLength(1);
    model.handleMessage({ ...update(2, []), cleared: true });
    expect(model.warningList()).toHaveLength(0);
    expect(model.events).toHaveLength(0);
  });
});

describe('compiled mode counts', () => {
  it('reads dynamo graphs and recompiles from the snapshot counters, beside XLA compiles', () => {
    const model = new KernelModel({ clock: new ManualClock() });
    model.handleMessage(hello());
    expect(model.snapshot.dynamo).toEqual({ graphs: 0, recompiles: 0 });
    const counters = { UncachedCompile: 5, DynamoExtractCompiledGraph: 3, DynamoRecompile: 1 };
    model.handleMessage(update(1, [], { snapshot: snapshot({ counters }) }));
    expect(model.snapshot.dynamo).toEqual({ graphs: 3, recompiles: 1 });
    expect(model.snapshot.compiles.uncached).toBe(2); // XLA's count stays its own field
    model.applySnapshot(snapshot({ counters: {} })); // after a clear
    expect(model.snapshot.dynamo).toEqual({ graphs: 0, recompiles: 0 });
    model.applySnapshot(snapshot({ counters: { DynamoExtractCompiledGraph: 'many' } }));
    expect(model.snapshot.dynamo.graphs).toBe(0); // not a number: the safe default
    model.applySnapshot(snapshot({ counters: null }));
    expect(model.snapshot.dynamo).toEqual({ graphs: 0, recompiles: 0 });
  });
});
