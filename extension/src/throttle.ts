/**
 * Coalesces bursts of "something changed" into at most one call per interval.
 *
 * A kernel that was blocked (a long compile, a busy cell) delivers its queued updates
 * back to back; redrawing the panel for each of them would only burn the main thread.
 * The first change after a quiet period is delivered at once so the panel stays live.
 */

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: handle => clearTimeout(handle as ReturnType<typeof setTimeout>)
};

export class Throttle {
  private _last = -Infinity;
  private _timer: unknown = null;

  constructor(
    private readonly _fn: () => void,
    private readonly _intervalMs: number,
    private readonly _clock: Clock = realClock
  ) {}

  /** Asks for a call; it happens now or at the end of the current interval. */
  schedule(): void {
    if (this._timer !== null) {
      return;
    }
    const wait = this._last + this._intervalMs - this._clock.now();
    if (wait <= 0) {
      this._fire();
    } else {
      this._timer = this._clock.setTimeout(() => {
        this._timer = null;
        this._fire();
      }, wait);
    }
  }

  /** Drops a pending call (the owner is going away). */
  cancel(): void {
    if (this._timer !== null) {
      this._clock.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private _fire(): void {
    this._last = this._clock.now();
    this._fn();
  }
}
