import { describe, expect, it } from 'vitest';

import { Throttle } from '../src/throttle';
import { ManualClock } from './helpers';

describe('Throttle', () => {
  it('fires at once after a quiet period, then at most once per interval', () => {
    const clock = new ManualClock();
    let calls = 0;
    const throttle = new Throttle(() => (calls += 1), 250, clock);
    throttle.schedule();
    expect(calls).toBe(1);
    throttle.schedule();
    throttle.schedule();
    expect(calls).toBe(1);
    clock.advance(249);
    expect(calls).toBe(1);
    clock.advance(1);
    expect(calls).toBe(2);
    clock.advance(5000);
    throttle.schedule();
    expect(calls).toBe(3);
  });

  it('cancel drops the pending call', () => {
    const clock = new ManualClock();
    let calls = 0;
    const throttle = new Throttle(() => (calls += 1), 100, clock);
    throttle.schedule();
    throttle.schedule();
    throttle.cancel();
    clock.advance(500);
    expect(calls).toBe(1);
  });
});
