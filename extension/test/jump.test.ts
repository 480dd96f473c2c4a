import { describe, expect, it } from 'vitest';

import { CellLike, findCellIndex } from '../src/jump';

const cells: CellLike[] = [
  { id: 'md', type: 'markdown', executionCount: null },
  { id: 'a', type: 'code', executionCount: 3 },
  { id: 'b', type: 'code', executionCount: 7 },
  { id: 'c', type: 'code', executionCount: 3 }
];

describe('finding the cell of a location', () => {
  it('prefers the cell id', () => {
    expect(findCellIndex(cells, { cell_id: 'a', execution_count: 7 })).toBe(1);
  });

  it('falls back to the newest code cell with that execution count', () => {
    expect(findCellIndex(cells, { cell_id: null, execution_count: 3 })).toBe(3);
    expect(findCellIndex(cells, { cell_id: 'gone', execution_count: 7 })).toBe(2);
  });

  it('finds nothing for code outside cells', () => {
    expect(findCellIndex(cells, null)).toBe(-1);
    expect(findCellIndex(cells, { cell_id: null, execution_count: null })).toBe(-1);
    expect(findCellIndex(cells, { cell_id: 'x', execution_count: 99 })).toBe(-1);
  });
});
