/**
 * The one way this extension builds DOM: elements with attributes and text children.
 *
 * Everything shown comes from the kernel (file paths, op names, tensor names, warning
 * messages), so text is only ever set as text nodes: there is no innerHTML anywhere
 * in the extension. Attribute values go through setAttribute, which never parses
 * markup; event-handler attributes are refused so a caller cannot route kernel text
 * into one by mistake.
 */

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  /** a CSS class string */
  class?: string;
  /** plain attributes (data-*, title, aria-*, role, ...) */
  attrs?: Record<string, string | number | null | undefined>;
  /** event listeners, attached with addEventListener */
  on?: Partial<Record<keyof HTMLElementEventMap, (event: Event) => void>>;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

function setAttributes(el: Element, attrs: Props['attrs']): void {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined) {
      continue;
    }
    if (/^on/i.test(name)) {
      throw new Error(`refusing to set event-handler attribute ${name}`);
    }
    el.setAttribute(name, String(value));
  }
}

function append(el: Element, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    el.appendChild(
      typeof child === 'string' || typeof child === 'number'
        ? el.ownerDocument.createTextNode(String(child))
        : child
    );
  }
}

/** Creates an HTML element; string children become text nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props.class) {
    el.className = props.class;
  }
  setAttributes(el, props.attrs);
  for (const [type, listener] of Object.entries(props.on ?? {})) {
    el.addEventListener(type, listener as EventListener);
  }
  append(el, children);
  return el;
}

/** Creates an SVG element (for the timeline); same rules as `h`. */
export function s(tag: string, attrs: Props['attrs'] = {}, ...children: Child[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag) as SVGElement;
  setAttributes(el, attrs);
  append(el, children);
  return el;
}

/** Replaces an element's children (without parsing anything). */
export function replaceChildren(el: Element, ...children: Child[]): void {
  while (el.firstChild) {
    el.removeChild(el.firstChild);
  }
  append(el, children);
}

/** Sets an element's text only when it changed (keeps selections and avoids reflow). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}
