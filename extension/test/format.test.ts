import { describe, expect, it } from 'vitest';

import { formatBytes, formatCount, formatElapsed, formatSeconds, shortHash, truncate } from '../src/format';

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
    expect(formatBytes(4096)).toBe('4.0 KiB');
    expect(shortHash('3fa2c0ffee1234')).toBe('3fa2c0ff…');
    expect(shortHash('3fa2')).toBe('3fa2');
    expect(truncate('x'.repeat(10), 5)).toBe('xxxx…');
  });
});
