import { describe, expect, it } from 'vitest';

import { KernelModel, groupWarnings } from '../src/model';
import { readWarning, XlaWarning } from '../src/protocol';
import { runtimeRows } from '../src/runtimeinfo';
import { hello, location, warning } from './helpers';

const w = (id: number, overrides: Record<string, unknown> = {}): XlaWarning =>
  readWarning(warning(id, overrides))!;

describe('warning cards', () => {
  it('merges the findings of one kind and title at one line into one card', () => {
    const cards = groupWarnings([
      w(2, { message: 'keep: s64[8,1] → s64[7,1]', graph_hash: 'b2' }),
      w(3, { message: 'keep: s64[7,1] → s64[5,1]', graph_hash: 'c3' }),
      w(4, { message: 'keep: s64[5,1] → s64[6,1]', graph_hash: 'd4', count: 2 }),
      w(1, { category: 'fallback', title: 'aten::nonzero ran on the CPU', message: 'no lowering', count: 4 })
    ]);
    expect(cards.map(c => c.id)).toEqual([4, 1]);
    const [recompile, fallback] = cards;
    expect(recompile.count).toBe(4);
    expect(recompile.message).toBe('keep: s64[5,1] → s64[6,1]');
    expect(recompile.variants.map(v => v.id)).toEqual([2, 3, 4]);
    // The graph it replaced: the previous finding's at this line, when the kernel does not say.
    expect(recompile.graph_hash).toBe('d4');
    expect(recompile.previous_graph_hash).toBe('c3');
    expect(fallback.count).toBe(4);
    expect(fallback.variants).toHaveLength(1);
  });

  it('keeps findings at different lines or cells apart, and prefers the kernel’s previous graph', () => {
    const cards = groupWarnings([
      w(1, { where: location(4, 7) }),
      w(2, { where: location(5, 7) }),
      w(3, { where: location(4, 8, 'cell-b'), previous_graph_hash: 'aa', graph_hash: 'bb' }),
      w(4, { where: null }),
      w(5, { where: null })
    ]);
    expect(cards.map(c => c.id)).toEqual([5, 4, 3, 2, 1]);
    expect(cards[2].previous_graph_hash).toBe('aa');
    expect(cards[4].previous_graph_hash).toBeNull();
  });

  it('the model shows one card per finding, however often the kernel repeats it', () => {
    const model = new KernelModel();
    model.handleMessage(hello({ warnings: [warning(1), warning(1, { count: 2 }), warning(2)] }));
    expect(model.warningCards()).toHaveLength(1);
    expect(model.warningCards()[0].count).toBe(3);
    model.dispose();
  });
});

describe('where the kernel runs', () => {
  const runtime = {
    started: true,
    platform: 'gpu',
    hw: 'CUDA',
    device_count: 2,
    device_kind: 'NVIDIA H100 80GB HBM3',
    jax: '0.10.2',
    torch: '2.13.0',
    compile_cache_dir: '/cache/jax'
  };

  it('says platform, device count and kind, versions and the compile cache', () => {
    expect(runtimeRows(runtime, '0.1.0')).toEqual([
      ['Runs on', 'CUDA, 2 devices (NVIDIA H100 80GB HBM3)'],
      ['Versions', 'xlalab 0.1.0, JAX 0.10.2, torch 2.13.0'],
      ['Compile cache', 'on, in /cache/jax']
    ]);
    const cpu = {
      ...runtime,
      platform: 'cpu',
      hw: 'CPU',
      device_count: 1,
      device_kind: 'cpu',
      compile_cache_dir: null
    };
    expect(runtimeRows(cpu, '0.1.0')[0]).toEqual(['Runs on', 'CPU, 1 device']);
    expect(runtimeRows(cpu, '0.1.0')[2]).toEqual(['Compile cache', 'off']);
  });

  it('before the device starts, and for a kernel that does not say', () => {
    const rows = runtimeRows({ ...runtime, started: false, device_count: 0 }, '0.1.0');
    expect(rows[0][1]).toMatch(/not started yet/);
    expect(rows[1][1]).toContain('JAX 0.10.2');
    expect(runtimeRows(null, '0.1.0')[0][1]).toMatch(/unknown/);
  });
});
