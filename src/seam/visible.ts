// Text a model wrote, made safe to print on a terminal: a newline or an escape sequence in a label
// would forge rows or drive the terminal, and a bidirectional control would show it reversed.

/** C0 and C1 controls, and the invisible bidirectional and line-separator controls. */
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
/** The same, but newlines and tabs stay: for multi-line text printed as it is. */
const HIDDEN_BUT_LINES = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

function escaped(c: string): string {
  const code = c.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
}

/** `text` with every control character shown as `\xNN` (or `\uNNNN`): one line, printed as it reads. */
export function visible(text: string): string {
  return text.replace(HIDDEN, escaped);
}

/** `text` as `visible` shows it, keeping its newlines and tabs. */
export function visibleLines(text: string): string {
  return text.replace(HIDDEN_BUT_LINES, escaped);
}
