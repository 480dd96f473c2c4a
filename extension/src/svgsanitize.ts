/**
 * Makes Graphviz's SVG safe to put into the page.
 *
 * Dot labels, tooltips and URLs are user-controlled (op names, tensor names, file
 * paths), and Graphviz copies some of them into the SVG verbatim (`URL=` becomes an
 * `<a xlink:href>`). Rather than deleting known-bad parts, this copies known-good parts
 * into a fresh tree: an allowlist of drawing elements and presentation attributes.
 * Scripts, foreignObject, images, links, styles and event handlers never get copied.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Elements Graphviz draws with. `a` is unwrapped: its children are kept, the link is not. */
const ALLOWED_ELEMENTS = new Set([
  'svg',
  'g',
  'title',
  'desc',
  'polygon',
  'polyline',
  'path',
  'ellipse',
  'circle',
  'rect',
  'line',
  'text',
  'tspan',
  'defs',
  'linearGradient',
  'radialGradient',
  'stop'
]);
const UNWRAPPED_ELEMENTS = new Set(['a']);

const ALLOWED_ATTRIBUTES = new Set([
  'id',
  'class',
  'transform',
  'viewBox',
  'width',
  'height',
  'preserveAspectRatio',
  'x',
  'y',
  'x1',
  'y1',
  'x2',
  'y2',
  'cx',
  'cy',
  'r',
  'rx',
  'ry',
  'd',
  'points',
  'fill',
  'fill-opacity',
  'stroke',
  'stroke-width',
  'stroke-dasharray',
  'stroke-opacity',
  'opacity',
  'font-family',
  'font-size',
  'font-weight',
  'font-style',
  'text-anchor',
  'text-decoration',
  'dominant-baseline',
  'baseline-shift',
  'textLength',
  'lengthAdjust',
  'offset',
  'stop-color',
  'stop-opacity',
  'gradientUnits',
  'gradientTransform'
]);

/** A value may reference a local gradient (`url(#l_0)`) but nothing else. */
function isSafeValue(value: string): boolean {
  // Browsers ignore whitespace and control characters inside a URL scheme.
  const compact = Array.from(value)
    .filter(ch => ch.charCodeAt(0) > 32)
    .join('')
    .toLowerCase();
  if (compact.includes('javascript:') || compact.includes('expression(')) {
    return false;
  }
  const urls = compact.match(/url\([^)]*\)/g) ?? [];
  return urls.every(u => /^url\(['"]?#[\w.-]+['"]?\)$/.test(u));
}

function copyClean(source: Element, target: Element, doc: Document): void {
  for (const attr of Array.from(source.attributes)) {
    // Namespaced attributes (xlink:href, xml:space...) are never needed for drawing.
    if (attr.prefix || !ALLOWED_ATTRIBUTES.has(attr.localName) || !isSafeValue(attr.value)) {
      continue;
    }
    target.setAttribute(attr.localName, attr.value);
  }
  appendCleanChildren(source, target, doc);
}

function appendCleanChildren(source: Element, target: Element, doc: Document): void {
  for (const child of Array.from(source.childNodes)) {
    if (child.nodeType === 3 /* text */) {
      target.appendChild(doc.createTextNode(child.nodeValue ?? ''));
    } else if (child.nodeType === 1 /* element */) {
      const el = child as Element;
      if (el.namespaceURI !== SVG_NS) {
        continue;
      }
      if (UNWRAPPED_ELEMENTS.has(el.localName)) {
        appendCleanChildren(el, target, doc);
      } else if (ALLOWED_ELEMENTS.has(el.localName)) {
        const copy = doc.createElementNS(SVG_NS, el.localName);
        copyClean(el, copy, doc);
        target.appendChild(copy);
      }
    }
    // comments, processing instructions, CDATA: dropped
  }
}

/**
 * Parses SVG text and returns a sanitized copy owned by `doc`, or null when the text
 * is not an SVG document.
 */
export function sanitizeSvg(svgText: string, doc: Document = document): SVGSVGElement | null {
  const parsed = new DOMParser().parseFromString(svgText, 'image/svg+xml');
  const root = parsed.documentElement;
  if (
    !root ||
    root.localName !== 'svg' ||
    root.namespaceURI !== SVG_NS ||
    parsed.getElementsByTagName('parsererror').length > 0
  ) {
    return null;
  }
  const clean = doc.createElementNS(SVG_NS, 'svg') as SVGSVGElement;
  copyClean(root, clean, doc);
  return clean;
}
