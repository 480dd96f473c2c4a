/**
 * Two graphs compiled at one place, side by side: the earlier one on the left, the one
 * that replaced it on the right, with the nodes that differ highlighted and the changed
 * shapes written under them.
 */
import { Widget } from '@lumino/widgets';

import { h, replaceChildren } from './dom';
import { countOf, shortHash, truncate } from './format';
import { diffGraphs } from './graphdiff';
import { readGraphPayload } from './graphpolicy';
import { GraphView } from './graphview';

/** At most this many differences are listed above the graphs. */
const MAX_LINES = 12;

export class GraphDiffView extends Widget {
  private readonly _before = new GraphView();
  private readonly _after = new GraphView();
  private readonly _summary = h('div', {
    class: 'xlalab-Diff-summary',
    attrs: { 'data-testid': 'xlalab-diff-summary' }
  });

  constructor(title: string) {
    super();
    this.addClass('xlalab-Diff');
    this.node.setAttribute('data-testid', 'xlalab-graph-diff');
    const column = (label: string, view: GraphView, testid: string): HTMLElement =>
      h(
        'div',
        { class: 'xlalab-Diff-side', attrs: { 'data-testid': testid } },
        h('h3', {}, label),
        view.node
      );
    replaceChildren(
      this.node,
      h('div', { class: 'xlalab-Diff-title' }, truncate(title, 200)),
      this._summary,
      h(
        'div',
        { class: 'xlalab-Diff-sides' },
        column('Before: the graph compiled earlier here', this._before, 'xlalab-diff-before'),
        column('After: the graph that replaced it', this._after, 'xlalab-diff-after')
      )
    );
  }

  async render(rawBefore: unknown, rawAfter: unknown): Promise<void> {
    const before = readGraphPayload(rawBefore);
    const after = readGraphPayload(rawAfter);
    if (!before || !after) {
      replaceChildren(this._summary, 'The kernel did not send both graphs.');
      return;
    }
    const diff = diffGraphs(before, after);
    const lines = diff.lines.slice(0, MAX_LINES);
    replaceChildren(
      this._summary,
      h(
        'p',
        {},
        diff.lines.length
          ? `${countOf(diff.lines.length, 'difference')} between graph ${shortHash(before.hash)} and graph ${shortHash(after.hash)}:`
          : `Graph ${shortHash(before.hash)} and graph ${shortHash(after.hash)} have the same ops and shapes: ` +
              'what changed is a value baked into the graph or a compile setting.'
      ),
      lines.length ? h('ul', {}, ...lines.map(line => h('li', {}, h('code', {}, line)))) : null,
      diff.lines.length > MAX_LINES ? h('p', {}, `… and ${diff.lines.length - MAX_LINES} more.`) : null
    );
    await Promise.all([
      this._before.renderPayload(rawBefore, { changes: diff.before }),
      this._after.renderPayload(rawAfter, { changes: diff.after })
    ]);
  }

  dispose(): void {
    this._before.dispose();
    this._after.dispose();
    super.dispose();
  }
}
