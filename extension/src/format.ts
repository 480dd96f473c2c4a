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

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(bytes: number): string {
  let value = Number.isFinite(bytes) && bytes > 0 ? bytes : 0;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${BYTE_UNITS[unit]}`;
}

/** A graph hash as shown in lists: its first 8 hex digits and an ellipsis. */
export function shortHash(hash: string): string {
  return hash.length > 8 ? `${hash.slice(0, 8)}…` : hash;
}

/** Cuts very long user text (a message, a path) so one item cannot flood the panel. */
export function truncate(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
