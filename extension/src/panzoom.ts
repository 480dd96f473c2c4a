/**
 * Pan and zoom for an SVG by moving its viewBox: wheel zooms around the pointer, drag
 * pans, and the buttons zoom around the centre or fit the whole graph.
 */

export interface ViewBox {
  x: number;
  y: number;
  width: number;
  height: number;
}

export const MIN_SCALE = 0.02;
export const MAX_SCALE = 40;

/** Zooms `view` by `factor` (> 1 zooms in) keeping the user-space point (px, py) still. */
export function zoomViewBox(view: ViewBox, factor: number, px: number, py: number): ViewBox {
  return {
    x: px - (px - view.x) / factor,
    y: py - (py - view.y) / factor,
    width: view.width / factor,
    height: view.height / factor
  };
}

export function parseViewBox(text: string | null): ViewBox | null {
  const parts = (text ?? '')
    .trim()
    .split(/[\s,]+/)
    .map(Number);
  if (parts.length !== 4 || parts.some(p => !Number.isFinite(p)) || parts[2] <= 0 || parts[3] <= 0) {
    return null;
  }
  return { x: parts[0], y: parts[1], width: parts[2], height: parts[3] };
}

/** A drag shorter than this many pixels is a click (it selects a node). */
const CLICK_SLOP_PX = 4;

export class PanZoom {
  private _view: ViewBox;
  private _drag: { id: number; x: number; y: number; moved: boolean } | null = null;
  /** true right after a drag, so the click that ends it does not select a node */
  private _suppressClick = false;

  constructor(
    private readonly _svg: SVGSVGElement,
    private readonly _home: ViewBox
  ) {
    this._view = { ..._home };
    _svg.setAttribute('preserveAspectRatio', 'xMidYMid meet');
    _svg.addEventListener('wheel', this._onWheel, { passive: false });
    _svg.addEventListener('pointerdown', this._onPointerDown);
    _svg.addEventListener('pointermove', this._onPointerMove);
    _svg.addEventListener('pointerup', this._onPointerUp);
    _svg.addEventListener('pointercancel', this._onPointerUp);
    _svg.addEventListener('click', this._onClickCapture, true);
    this._apply();
  }

  /** The zoom relative to the fitted view (1 = fit). */
  get scale(): number {
    return this._home.width / this._view.width;
  }

  fit(): void {
    this._view = { ...this._home };
    this._apply();
  }

  /** Screen pixels per SVG user unit, as drawn now (0 when the SVG is not laid out). */
  pixelsPerUnit(): number {
    const ctm = this._svg.getScreenCTM();
    return ctm ? Math.abs(ctm.a) : 0;
  }

  /**
   * Zooms to `pixelsPerUnit` screen pixels per user unit, showing the top of the drawing,
   * centred across; does nothing before the SVG has a size on screen.
   */
  showTopAt(pixelsPerUnit: number): void {
    const rect = this._svg.getBoundingClientRect();
    if (rect.width <= 0 || rect.height <= 0 || pixelsPerUnit <= 0) {
      return;
    }
    const width = rect.width / pixelsPerUnit;
    const height = rect.height / pixelsPerUnit;
    const home = this._home;
    this._view = { x: home.x + (home.width - width) / 2, y: home.y, width, height };
    this._apply();
  }

  zoomIn(): void {
    this._zoomAroundCentre(1.25);
  }

  zoomOut(): void {
    this._zoomAroundCentre(0.8);
  }

  private _zoomAroundCentre(factor: number): void {
    const v = this._view;
    this._zoom(factor, v.x + v.width / 2, v.y + v.height / 2);
  }

  private _zoom(factor: number, px: number, py: number): void {
    const scale = this.scale * factor;
    if (scale < MIN_SCALE || scale > MAX_SCALE) {
      return;
    }
    this._view = zoomViewBox(this._view, factor, px, py);
    this._apply();
  }

  /** Client (screen) coordinates to the SVG's user space. */
  private _toUser(clientX: number, clientY: number): { x: number; y: number } | null {
    const ctm = this._svg.getScreenCTM();
    if (!ctm) {
      return null;
    }
    const point = new DOMPoint(clientX, clientY).matrixTransform(ctm.inverse());
    return { x: point.x, y: point.y };
  }

  private _onWheel = (event: WheelEvent): void => {
    event.preventDefault();
    const point = this._toUser(event.clientX, event.clientY);
    if (point) {
      // Pixel- and line-based wheels differ by ~30x; normalise to pixels.
      const delta = event.deltaMode === 1 ? event.deltaY * 30 : event.deltaY;
      this._zoom(Math.exp(-delta * 0.0015), point.x, point.y);
    }
  };

  private _onPointerDown = (event: PointerEvent): void => {
    if (event.button !== 0) {
      return;
    }
    this._drag = { id: event.pointerId, x: event.clientX, y: event.clientY, moved: false };
  };

  private _onPointerMove = (event: PointerEvent): void => {
    const drag = this._drag;
    if (!drag || drag.id !== event.pointerId) {
      return;
    }
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!drag.moved && Math.hypot(dx, dy) < CLICK_SLOP_PX) {
      return;
    }
    if (!drag.moved) {
      drag.moved = true;
      this._svg.setPointerCapture?.(event.pointerId);
      this._svg.classList.add('xlalab-mod-dragging');
    }
    const ctm = this._svg.getScreenCTM();
    if (ctm && ctm.a !== 0 && ctm.d !== 0) {
      this._view = { ...this._view, x: this._view.x - dx / ctm.a, y: this._view.y - dy / ctm.d };
      this._apply();
    }
    drag.x = event.clientX;
    drag.y = event.clientY;
  };

  private _onPointerUp = (event: PointerEvent): void => {
    if (this._drag?.id !== event.pointerId) {
      return;
    }
    this._suppressClick = this._drag.moved;
    this._drag = null;
    this._svg.classList.remove('xlalab-mod-dragging');
  };

  private _onClickCapture = (event: MouseEvent): void => {
    if (this._suppressClick) {
      this._suppressClick = false;
      event.stopPropagation();
    }
  };

  private _apply(): void {
    const v = this._view;
    this._svg.setAttribute('viewBox', `${v.x} ${v.y} ${v.width} ${v.height}`);
  }
}
