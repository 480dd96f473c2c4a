import { describe, expect, it } from 'vitest';

import { parseViewBox, zoomViewBox } from '../src/panzoom';

describe('pan/zoom math', () => {
  it('zooming keeps the pointer point fixed', () => {
    const view = { x: 0, y: 0, width: 100, height: 50 };
    const zoomed = zoomViewBox(view, 2, 80, 10);
    expect(zoomed).toEqual({ x: 40, y: 5, width: 50, height: 25 });
    // the point's relative position is unchanged
    expect((80 - zoomed.x) / zoomed.width).toBeCloseTo((80 - view.x) / view.width);
    expect(zoomViewBox(zoomed, 0.5, 80, 10)).toEqual(view);
  });

  it('parses viewBox attributes', () => {
    expect(parseViewBox('0.00 0.00 116.00 188.00')).toEqual({ x: 0, y: 0, width: 116, height: 188 });
    expect(parseViewBox('0,0,10,10')).toEqual({ x: 0, y: 0, width: 10, height: 10 });
    expect(parseViewBox('0 0 0 10')).toBeNull();
    expect(parseViewBox(null)).toBeNull();
    expect(parseViewBox('a b c d')).toBeNull();
  });
});
