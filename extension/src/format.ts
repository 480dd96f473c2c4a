/**
 * Number and label formatting shared by the panel, the status bar and the graph view.
 * Pure functions: the DOM contract says a count's element holds only its number, so
 * every count goes through here.
 */

/** Integers as plain digits ("1234"), the contract's count format. */
export function formatCount(n: number): string {
  return String(Math.round(Number.isFinite(n) ? n : 0));
}

/** Seconds with a precision that suits the size: "0.81 s", "12.3 s", "245 s". */
export function formatSeconds(seconds: number): string {
  const s = Number.isFinite(seconds) && seconds > 0 ? seconds : 0;
  if (s < 10) {
    return `${s.toFixed(2)} s`;
  }
  if (s < 100) {
    return `${s.toFixed(1)} s`;
  }
  return `${Math.round(s)} s`;
}

/** The elapsed-time form used while something is running: "1.2 s". */
export function formatElapsed(seconds: number): string {
  const s = Number.isFinite(seconds) && seconds > 0 ? seconds : 0;
  return s < 100 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

const BYTE_UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/**
 * Sizes as a person writes them: "4 B", "5.1 KB", "12 MB" (decimal units, one decimal
 * below 10, none from 10 on, never a trailing ".0").
 */
export function formatBytes(bytes: number): string {
  let value = Number.isFinite(bytes) && bytes > 0 ? bytes : 0;
  let unit = 0;
  while (value >= 1000 && unit < BYTE_UNITS.length - 1) {
    value /= 1000;
    unit += 1;
  }
  if (unit === 0) {
    return `${Math.round(value)} B`;
  }
  // 999.96 KB rounds to "1000 KB": say "1 MB" instead.
  if (Math.round(value) >= 1000 && unit < BYTE_UNITS.length - 1) {
    value /= 1000;
    unit += 1;
  }
  const text = value < 9.95 ? value.toFixed(1).replace(/\.0$/, '') : String(Math.round(value));
  return `${text} ${BYTE_UNITS[unit]}`;
}

/**
 * A count with its noun, singular or plural as the number asks: "1 transfer",
 * "3 transfers", "0 compiles". `plural` defaults to the noun plus "s".
 */
export function countOf(n: number, noun: string, plural = `${noun}s`): string {
  const count = formatCount(n);
  return `${count} ${count === '1' ? noun : plural}`;
}

/** The noun alone, for text around a count element: "transfer" for 1, else "transfers". */
export function nounFor(n: number, noun: string, plural = `${noun}s`): string {
  return formatCount(n) === '1' ? noun : plural;
}

/** A graph hash as shown in lists: its first 8 hex digits and an ellipsis. */
export function shortHash(hash: string): string {
  return hash.length > 8 ? `${hash.slice(0, 8)}…` : hash;
}

/** Cuts very long user text (a message, a path) so one item cannot flood the panel. */
export function truncate(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
