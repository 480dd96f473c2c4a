/**
 * The panel's warning items: recompiles, CPU fallbacks and host transfers, each with
 * its source line; clicking one (or Enter on it) jumps to that line.
 */
import { h, replaceChildren } from './dom';
import { truncate } from './format';
import { SourceLocation, XlaWarning } from './protocol';

function warningItem(warning: XlaWarning, jumpTo: (where: SourceLocation) => void): HTMLElement {
  const where = warning.where;
  const jump = (): void => {
    if (where) {
      jumpTo(where);
    }
  };
  // The whole user stack, innermost first, as the item's tooltip.
  const frames = warning.frames.map(f => `${f.label} in ${f.function}`).join('\n');
  return h(
    'li',
    {
      class: `xlalab-Warning xlalab-Warning-${warning.category}`,
      attrs: {
        'data-testid': 'xlalab-warning',
        'data-category': warning.category,
        'data-cell-id': where?.cell?.cell_id ?? '',
        'data-line': where?.line ?? '',
        role: 'button',
        tabindex: 0,
        title: frames
      },
      on: {
        click: jump,
        keydown: (event: Event) => {
          if ((event as KeyboardEvent).key === 'Enter') {
            jump();
          }
        }
      }
    },
    h(
      'div',
      { class: 'xlalab-Warning-head' },
      h('span', { class: 'xlalab-Warning-category' }, warning.category),
      h('span', { class: 'xlalab-Warning-title' }, truncate(warning.title, 200)),
      warning.count > 1 ? h('span', { class: 'xlalab-Warning-count' }, `× ${warning.count}`) : null
    ),
    h('div', { class: 'xlalab-Warning-message' }, truncate(warning.message)),
    h('div', { class: 'xlalab-Warning-where' }, where?.label ?? '')
  );
}

/** Fills `list` with one item per warning (newest first), or a "No warnings." line. */
export function renderWarnings(
  list: HTMLElement,
  warnings: XlaWarning[],
  jumpTo: (where: SourceLocation) => void
): void {
  if (!warnings.length) {
    replaceChildren(list, h('li', { class: 'xlalab-Empty' }, 'No warnings.'));
    return;
  }
  replaceChildren(list, ...warnings.map(w => warningItem(w, jumpTo)));
}
