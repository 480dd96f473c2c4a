// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';

import { sanitizeSvg } from '../src/svgsanitize';

const graphviz = `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg width="116pt" height="188pt" viewBox="0.00 0.00 116.00 188.00" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">
<g id="graph0" class="graph" transform="scale(1 1) rotate(0) translate(4 184)">
<title>G</title>
<polygon fill="white" stroke="none" points="-4,4 -4,-184 112,-184 112,4 -4,4"/>
<!-- node3 -->
<g id="node1" class="node">
<title>node3</title>
<a xlink:href="javascript:alert(1)" xlink:title="&lt;script&gt;">
<ellipse fill="url(#l_0)" stroke="black" cx="54" cy="-162" rx="54" ry="18" onclick="alert(1)" style="fill:url(http://evil/x)"/>
<text text-anchor="middle" x="54" y="-158.3" font-family="Times,serif" font-size="14.00">&lt;script&gt;alert(3)&lt;/script&gt;</text>
</a>
</g>
<script>alert(2)</script>
<foreignObject width="10" height="10"><div xmlns="http://www.w3.org/1999/xhtml">x</div></foreignObject>
<image href="http://evil/x.png" width="1" height="1"/>
<rect fill="url(http://evil/y)" width="1" height="1"/>
<set attributeName="onmouseover" to="alert(4)"/>
</g>
</svg>`;

describe('sanitizeSvg', () => {
  const svg = sanitizeSvg(graphviz)!;

  it('keeps the drawing', () => {
    expect(svg).not.toBeNull();
    expect(svg.getAttribute('viewBox')).toBe('0.00 0.00 116.00 188.00');
    expect(svg.querySelector('g.node title')?.textContent).toBe('node3');
    expect(svg.querySelector('ellipse')?.getAttribute('fill')).toBe('url(#l_0)');
    // the label's text survives as text
    expect(svg.querySelector('text')?.textContent).toBe('<script>alert(3)</script>');
  });

  it('removes scripts, foreignObject, images, links, animation and handlers', () => {
    const text = svg.outerHTML;
    for (const bad of [
      '<script',
      'foreignObject',
      '<image',
      '<a ',
      '<set',
      'onclick',
      'javascript:',
      'http://evil',
      'style='
    ]) {
      expect(text).not.toContain(bad);
    }
    expect(svg.querySelectorAll('script, foreignObject, image, a, set').length).toBe(0);
    // an attribute with a remote url() is dropped, the element stays
    expect(svg.querySelector('rect')?.hasAttribute('fill')).toBe(false);
  });

  it('every element and attribute is inert', () => {
    for (const el of Array.from(svg.querySelectorAll('*'))) {
      for (const attr of Array.from(el.attributes)) {
        expect(attr.name.toLowerCase().startsWith('on')).toBe(false);
        expect(attr.name).not.toContain('href');
      }
    }
  });

  it('rejects what is not SVG', () => {
    expect(sanitizeSvg('<html><body>x</body></html>')).toBeNull();
    expect(sanitizeSvg('not xml at all <')).toBeNull();
    expect(sanitizeSvg('<svg xmlns="http://www.w3.org/2000/svg"><g></svg>')).toBeNull();
  });

  it('handles javascript: hidden with whitespace and entities', () => {
    const tricky = sanitizeSvg(
      '<svg xmlns="http://www.w3.org/2000/svg"><rect fill="url(&#10;java&#9;script:alert(1))" stroke="url( #ok )"/></svg>'
    )!;
    expect(tricky.querySelector('rect')?.hasAttribute('fill')).toBe(false);
    expect(tricky.querySelector('rect')?.getAttribute('stroke')).toBe('url( #ok )');
  });
});
