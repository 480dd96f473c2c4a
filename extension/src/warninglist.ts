/**
 * The panel's warning cards: recompiles, CPU fallbacks and host transfers, one card per
 * line and kind, each with its source line; clicking one (or Enter on it) jumps to that
 * line. A recompile's card also opens the two graphs side by side.
 */
import { h, replaceChildren } from './dom';
import { truncate } from './format';
import { WarningCard } from './model';
import { SourceLocation } from './protocol';

export interface WarningActions {
  jumpTo(where: SourceLocation): void;
  /** opens the graph before and after a recompile */
  compare(card: WarningCard): void;
}

/** Details shown under a card's message; the rest are in its tooltip. */
const MAX_DETAILS = 3;

function compareButton(card: WarningCard, actions: WarningActions): HTMLElement | null {
  if (card.category !== 'recompile') {
    return null;
  }
  const ready = !!(card.graph_hash && card.previous_graph_hash);
  return h(
    'button',
    {
      class: 'jp-Button xlalab-Button xlalab-Warning-compare',
      attrs: {
        type: 'button',
        'data-testid': 'xlalab-compare-graphs',
        title: ready
          ? 'Open the graph compiled here before and the one that replaced it, side by side'
          : 'The kernel did not say which graph this one replaced',
        ...(ready ? {} : { disabled: 'disabled' })
      },
      on: {
        click: (event: Event) => {
          event.stopPropagation(); // the card itself jumps to the line
          actions.compare(card);
        },
        keydown: (event: Event) => event.stopPropagation()
      }
    },
    'Compare graphs'
  );
}

function warningItem(card: WarningCard, actions: WarningActions): HTMLElement {
  const where = card.where;
  const jump = (): void => {
    if (where) {
      actions.jumpTo(where);
    }
  };
  // The whole user stack, innermost first, and earlier variants, as the item's tooltip.
  const tooltip = [
    ...card.frames.map(f => `${f.label} in ${f.function}`),
    ...(card.variants.length > 1 ? ['', 'at this line:', ...card.variants.map(v => `  ${v.message}`)] : [])
  ].join('\n');
  return h(
    'li',
    {
      class: `xlalab-Warning xlalab-Warning-${card.category}`,
      attrs: {
        'data-testid': 'xlalab-warning',
        'data-category': card.category,
        'data-cell-id': where?.cell?.cell_id ?? '',
        'data-line': where?.line ?? '',
        'data-graph-hash': card.graph_hash ?? '',
        role: 'button',
        tabindex: 0,
        title: tooltip
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
      h('span', { class: 'xlalab-Warning-category' }, card.category.replace('_', ' ')),
      h('span', { class: 'xlalab-Warning-title' }, truncate(card.title, 200)),
      card.count > 1
        ? h(
            'span',
            { class: 'xlalab-Warning-count', attrs: { 'data-testid': 'xlalab-warning-count' } },
            `× ${card.count}`
          )
        : null
    ),
    h('div', { class: 'xlalab-Warning-message' }, truncate(card.message)),
    card.details.length
      ? h(
          'ul',
          { class: 'xlalab-Warning-details' },
          ...card.details.slice(0, MAX_DETAILS).map(d => h('li', {}, truncate(d, 200)))
        )
      : null,
    h(
      'div',
      { class: 'xlalab-Warning-foot' },
      h('span', { class: 'xlalab-Warning-where' }, where?.label ?? ''),
      compareButton(card, actions)
    )
  );
}

/** Fills `list` with one item per card (newest first), or a "No warnings." line. */
export function renderWarnings(list: HTMLElement, cards: WarningCard[], actions: WarningActions): void {
  if (!cards.length) {
    replaceChildren(list, h('li', { class: 'xlalab-Empty' }, 'No warnings.'));
    return;
  }
  replaceChildren(list, ...cards.map(card => warningItem(card, actions)));
}
