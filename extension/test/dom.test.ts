// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';

import { h, replaceChildren, s } from '../src/dom';

const evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>';

describe('DOM building escapes user text', () => {
  it('puts strings in as text, never as markup', () => {
    const el = h('div', { attrs: { 'data-op': evil, title: evil } }, evil, h('b', {}, evil));
    expect(el.textContent).toBe(evil + evil);
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('script')).toBeNull();
    expect(el.getAttribute('data-op')).toBe(evil);
    expect(el.innerHTML).toContain('&lt;img');
  });

  it('refuses event-handler attributes', () => {
    expect(() => h('div', { attrs: { onclick: 'alert(1)' } })).toThrow();
    expect(() => s('rect', { ONLOAD: 'x' })).toThrow();
  });

  it('replaceChildren replaces with text nodes', () => {
    const el = h('div', {}, 'old');
    replaceChildren(el, evil, null, false, 3);
    expect(el.childNodes).toHaveLength(2);
    expect(el.textContent).toBe(evil + '3');
  });
});
