//! One lexer pass over a document's text, before the parser: its tokens and
//! nesting, measured iteratively (the parser recurses, and a few KB of
//! brackets would overflow a stack), stopping at the first limit passed. A
//! `{` outside parentheses opens a selection set; `[` and `{` inside them
//! nest a value, which holds no parentheses.

/// What the lexer found, up to where it stopped; or, as the bounds of a
/// scan, where to stop: past any of them the document is refused anyway,
/// so the rest need not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Shape {
    /// Punctuators, names, numbers and strings; whitespace, commas and
    /// comments are not tokens.
    pub tokens: usize,
    /// Deepest selection-set nesting.
    pub selection_depth: usize,
    /// Deepest nesting of list and object values (and list types).
    pub value_depth: usize,
}

impl Shape {
    fn over(&self, bounds: &Shape) -> bool {
        self.tokens > bounds.tokens
            || self.selection_depth > bounds.selection_depth
            || self.value_depth > bounds.value_depth
    }
}

pub fn scan(text: &str, bounds: &Shape) -> Shape {
    let b = text.as_bytes();
    let mut shape = Shape::default();
    let mut nesting = Nesting::default();
    let mut i = 0;
    while i < b.len() && !shape.over(bounds) {
        if let Some(next) = skip_ignored(b, i) {
            i = next;
            continue;
        }
        nesting.token(b[i], &mut shape);
        i = token_end(b, i);
        shape.tokens += 1;
    }
    shape
}

/// Past whitespace, a comma or a comment at `i`; None when a token starts
/// there.
fn skip_ignored(b: &[u8], mut i: usize) -> Option<usize> {
    match b[i] {
        b' ' | b'\t' | b'\n' | b'\r' | b',' => Some(i + 1),
        b'#' => {
            while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                i += 1;
            }
            Some(i)
        }
        _ => None,
    }
}

/// Where the token starting at `i` ends (a punctuator is one byte).
fn token_end(b: &[u8], mut i: usize) -> usize {
    match b[i] {
        b'"' if b[i..].starts_with(b"\"\"\"") => {
            i += 3;
            while i < b.len() && !b[i..].starts_with(b"\"\"\"") {
                i += if b[i..].starts_with(b"\\\"\"\"") {
                    4
                } else {
                    1
                };
            }
            i + 3
        }
        b'"' => {
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i + 1
        }
        b'.' if b[i..].starts_with(b"...") => i + 3,
        c if c == b'_' || c.is_ascii_alphabetic() => {
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            i
        }
        c if c == b'-' || c.is_ascii_digit() => {
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'+' | b'-'))
            {
                i += 1;
            }
            i
        }
        _ => i + 1,
    }
}

/// Open selection sets; open parentheses; brackets open in the innermost
/// parentheses (reset when one opens, restored when it closes: values hold
/// no parentheses, so at most one level is saved).
#[derive(Default)]
struct Nesting {
    selections: usize,
    parens: usize,
    values: usize,
    outer_values: usize,
}

impl Nesting {
    /// Follows the token starting with `first`: only brackets change it.
    fn token(&mut self, first: u8, shape: &mut Shape) {
        match first {
            b'(' => {
                self.parens += 1;
                self.outer_values = self.values;
                self.values = 0;
            }
            b')' => {
                self.parens = self.parens.saturating_sub(1);
                self.values = self.outer_values;
                self.outer_values = 0;
            }
            b'{' if self.parens == 0 => {
                self.selections += 1;
                shape.selection_depth = shape.selection_depth.max(self.selections);
            }
            b'}' if self.parens == 0 => self.selections = self.selections.saturating_sub(1),
            b'[' | b'{' => {
                self.values += 1;
                shape.value_depth = shape.value_depth.max(self.values);
            }
            b']' | b'}' => self.values = self.values.saturating_sub(1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIDE: Shape = Shape {
        tokens: usize::MAX,
        selection_depth: usize::MAX,
        value_depth: usize::MAX,
    };

    fn shape(text: &str) -> Shape {
        scan(text, &WIDE)
    }

    #[test]
    fn tokens_are_counted_like_the_grammar() {
        assert_eq!(shape("{ a(b: 1) }").tokens, 8);
        assert_eq!(shape("# only a comment\n").tokens, 0);
        assert_eq!(shape("{ a(s: \"x y, z\") ...F }").tokens, 10);
        assert_eq!(shape("\"\"\" block \\\"\"\" \"\"\" b").tokens, 2);
        let bounds = Shape { tokens: 10, ..WIDE };
        assert_eq!(
            scan(&"a ".repeat(1000), &bounds).tokens,
            11,
            "stops past the bound"
        );
    }

    #[test]
    fn selection_sets_and_values_nest_separately() {
        let s = shape("{ a { b(x: [[1]], y: {z: [2]}) { c } } }");
        assert_eq!((s.selection_depth, s.value_depth), (3, 2));
        // Variable types and defaults, and directive arguments, are values.
        let s = shape("query($v: [[[Int]]] = [[[1]]]) { a @d(x: {y: {z: 1}}) }");
        assert_eq!((s.selection_depth, s.value_depth), (1, 3));
        // Brackets inside strings and comments are text.
        let s = shape("{ a(s: \"[[[[{{{{\", t: \"\"\"[[[\"\"\") # [[[[\n }");
        assert_eq!((s.selection_depth, s.value_depth), (1, 0));
        // Each argument list starts over.
        let s = shape("{ a(x: [[1]]) { b(y: [2]) } }");
        assert_eq!(s.value_depth, 2);
    }

    #[test]
    fn deep_nesting_is_found_without_reading_the_rest() {
        let deep = format!(
            "{{ a(x: {}1{}) }}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let bounds = Shape {
            value_depth: 32,
            ..WIDE
        };
        let s = scan(&deep, &bounds);
        assert_eq!(s.value_depth, 33);
        assert!(s.tokens < 40, "{} tokens read", s.tokens);
        let unbalanced = "]]]]))))}}}}".repeat(10);
        assert_eq!(shape(&unbalanced).value_depth, 0);
    }
}
