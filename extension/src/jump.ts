/**
 * Jumping from a warning to the notebook line it is about.
 *
 * The kernel reports where code ran as (cell_id, execution_count, line). The cell id
 * is the one JupyterLab sent with the execute request, so it names the cell even
 * after cells were moved; the execution count is the fallback for frontends that
 * send no id (or a notebook that was reloaded without ids).
 */
import { NotebookPanel } from '@jupyterlab/notebook';

import { CellRef, SourceLocation } from './protocol';

type CellWidget = NotebookPanel['content']['widgets'][number];

/** How long the jumped-to line stays highlighted. */
const FLASH_MS = 1600;

/** Minimal view of a cell for `findCellIndex`, so the lookup is testable without JupyterLab. */
export interface CellLike {
  id: string;
  type: string;
  executionCount: number | null;
}

/**
 * Index of the cell a location points at: by id first, then the last code cell with
 * that execution count (the newest run of it). -1 when none matches.
 */
export function findCellIndex(cells: CellLike[], ref: CellRef | null): number {
  if (!ref) {
    return -1;
  }
  if (ref.cell_id) {
    const byId = cells.findIndex(c => c.id === ref.cell_id);
    if (byId >= 0) {
      return byId;
    }
  }
  if (ref.execution_count !== null) {
    for (let i = cells.length - 1; i >= 0; i--) {
      if (cells[i].type === 'code' && cells[i].executionCount === ref.execution_count) {
        return i;
      }
    }
  }
  return -1;
}

function describeCell(cell: CellWidget): CellLike {
  const model = cell.model as CellWidget['model'] & { executionCount?: number | null };
  return { id: model.id, type: model.type, executionCount: model.executionCount ?? null };
}

/** Draws a fading bar over one editor line; an overlay, since CodeMirror owns its line DOM. */
function flashLine(cell: CellWidget, line: number): void {
  const editor = cell.editor;
  const host = cell.editorWidget?.node;
  const coords = editor?.getCoordinateForPosition({ line, column: 0 });
  if (!host || !coords) {
    return;
  }
  const hostRect = host.getBoundingClientRect();
  const flash = document.createElement('div');
  flash.className = 'xlalab-LineFlash';
  flash.style.top = `${coords.top - hostRect.top}px`;
  flash.style.height = `${Math.max(coords.bottom - coords.top, 12)}px`;
  host.classList.add('xlalab-mod-flashHost');
  host.appendChild(flash);
  setTimeout(() => flash.remove(), FLASH_MS);
}

/**
 * Selects the cell `where` points at, scrolls it into view, puts the cursor on the
 * line and highlights it. Returns false when the notebook has no such cell.
 */
export async function jumpToLocation(
  panel: NotebookPanel,
  where: SourceLocation,
  activate: (id: string) => void
): Promise<boolean> {
  const notebook = panel.content;
  const cells = [...notebook.widgets];
  const index = findCellIndex(cells.map(describeCell), where.cell);
  if (index < 0) {
    return false;
  }
  const cell = cells[index];
  activate(panel.id);
  notebook.deselectAll();
  notebook.activeCellIndex = index;
  await notebook.scrollToCell(cell, 'center');
  await cell.ready;
  const editor = cell.editor;
  if (!editor) {
    return true;
  }
  const line = Math.min(Math.max(where.line - 1, 0), Math.max(editor.lineCount - 1, 0));
  notebook.mode = 'edit';
  editor.setCursorPosition({ line, column: 0 });
  editor.revealPosition({ line, column: 0 });
  editor.focus();
  // Let the editor scroll before measuring where the line is drawn.
  requestAnimationFrame(() => flashLine(cell, line));
  return true;
}
