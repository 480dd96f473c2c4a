import { describe, expect, it } from 'vitest';

import {
  countOf,
  formatBytes,
  formatCount,
  formatElapsed,
  formatSeconds,
  nounFor,
  shortHash,
  truncate
} from '../src/format';

describe('formatting', () => {
  it('counts are plain digits', () => {
    expect(formatCount(1234)).toBe('1234');
    expect(formatCount(2.6)).toBe('3');
    expect(formatCount(Number.NaN)).toBe('0');
  });

  it('seconds keep a precision that suits their size', () => {
    expect(formatSeconds(0.81)).toBe('0.81 s');
    expect(formatSeconds(1.934)).toBe('1.93 s');
    expect(formatSeconds(12.34)).toBe('12.3 s');
    expect(formatSeconds(245.6)).toBe('246 s');
    expect(formatSeconds(-1)).toBe('0.00 s');
    expect(formatElapsed(1.23)).toBe('1.2 s');
  });

  it('bytes, hashes, truncation', () => {
    expect(formatBytes(12)).toBe('12 B');
    expect(shortHash('3fa2c0ffee1234')).toBe('3fa2c0ff…');
    expect(shortHash('3fa2')).toBe('3fa2');
    expect(truncate('x'.repeat(10), 5)).toBe('xxxx…');
  });

  it('sizes read as a person writes them', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(4)).toBe('4 B');
    expect(formatBytes(999)).toBe('999 B');
    expect(formatBytes(1000)).toBe('1 KB');
    expect(formatBytes(5120)).toBe('5.1 KB');
    expect(formatBytes(12_345)).toBe('12 KB');
    expect(formatBytes(999_960)).toBe('1 MB');
    expect(formatBytes(3_400_000_000)).toBe('3.4 GB');
    expect(formatBytes(-5)).toBe('0 B');
    expect(formatBytes(Number.NaN)).toBe('0 B');
  });

  it('counts take the noun in the number they need', () => {
    expect(countOf(1, 'transfer')).toBe('1 transfer');
    expect(countOf(0, 'transfer')).toBe('0 transfers');
    expect(countOf(2, 'compile')).toBe('2 compiles');
    expect(countOf(1.2, 'node')).toBe('1 node');
    expect(countOf(3, 'fallback op', 'fallback ops')).toBe('3 fallback ops');
    expect(countOf(1, 'device', 'devices')).toBe('1 device');
    expect(nounFor(1, 'execution')).toBe('execution');
    expect(nounFor(7, 'execution')).toBe('executions');
  });
});
