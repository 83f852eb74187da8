//! A strict reader for the S-expression subset that skill-runner's Seatbelt
//! profiles use, so that tests (and `skill-runner explain`) can prove a
//! profile well-formed without a Mac.
//!
//! The subset: lists in parentheses; atoms of `[A-Za-z0-9*_.:+!?<>=/-]`;
//! strings in double quotes with the escapes `\\`, `\"`, `\n` and `\t`, and no
//! raw control character; `;` comments to the end of the line. Anything else,
//! notably SBPL's `#"regex"` and `#t`/`#f` forms, is refused: the generated
//! profiles do not use them, and a reader that accepts only what the generator
//! emits catches a generator that emits something else.
//!
//! Invariant: `parse` either returns the whole text as a sequence of complete
//! expressions or an error naming the byte offset of the first problem.

use std::collections::BTreeSet;

/// One expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `( ... )`.
    List(Vec<Expr>),
    /// A bare word: `allow`, `file-read*`, `1`.
    Atom(String),
    /// A double-quoted string, unescaped.
    Str(String),
}

impl Expr {
    /// The first atom of a list (`allow` in `(allow file-read* ...)`).
    pub fn head(&self) -> Option<&str> {
        match self {
            Expr::List(items) => match items.first() {
                Some(Expr::Atom(atom)) => Some(atom),
                _ => None,
            },
            _ => None,
        }
    }

    /// The items of a list, or an empty slice for an atom or a string.
    pub fn items(&self) -> &[Expr] {
        match self {
            Expr::List(items) => items,
            _ => &[],
        }
    }
}

/// Why a text is not a well-formed expression sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A `)` without a matching `(`.
    #[error("unbalanced ')' at byte {offset}")]
    UnexpectedClose {
        /// Byte offset in the text.
        offset: usize,
    },
    /// A `(` that is never closed.
    #[error("'(' at byte {offset} is never closed")]
    UnclosedList {
        /// Byte offset in the text.
        offset: usize,
    },
    /// A string that is never closed.
    #[error("string starting at byte {offset} is never closed")]
    UnclosedString {
        /// Byte offset in the text.
        offset: usize,
    },
    /// An escape other than `\\`, `\"`, `\n`, `\t`.
    #[error("unknown escape '\\{escape}' in the string at byte {offset}")]
    BadEscape {
        /// Byte offset of the backslash.
        offset: usize,
        /// The character after it.
        escape: char,
    },
    /// A raw control character (newline included) inside a string.
    #[error("raw control character {found:?} in the string at byte {offset}: escape it")]
    ControlCharInString {
        /// Byte offset of the character.
        offset: usize,
        /// The character.
        found: char,
    },
    /// A character that starts no token of the subset.
    #[error("unexpected character {found:?} at byte {offset}")]
    UnexpectedChar {
        /// Byte offset of the character.
        offset: usize,
        /// The character.
        found: char,
    },
}

/// Parses `text` into its top-level expressions.
///
/// # Errors
///
/// The first [`ParseError`] met, with its byte offset.
pub fn parse(text: &str) -> Result<Vec<Expr>, ParseError> {
    // Open lists: (offset of their '(', items so far). The bottom entry is
    // the top level.
    let mut stack: Vec<(usize, Vec<Expr>)> = vec![(0, Vec::new())];
    let mut chars = text.char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        match c {
            ';' => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            c if c.is_whitespace() => {}
            '(' => stack.push((offset, Vec::new())),
            ')' => {
                if stack.len() == 1 {
                    return Err(ParseError::UnexpectedClose { offset });
                }
                let (_, items) = stack.pop().unwrap_or_default();
                push(&mut stack, Expr::List(items));
            }
            '"' => {
                let mut value = String::new();
                let mut closed = false;
                while let Some((at, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => {
                            let escaped = match chars.next() {
                                Some((_, '\\')) => '\\',
                                Some((_, '"')) => '"',
                                Some((_, 'n')) => '\n',
                                Some((_, 't')) => '\t',
                                Some((_, other)) => {
                                    return Err(ParseError::BadEscape {
                                        offset: at,
                                        escape: other,
                                    })
                                }
                                None => break,
                            };
                            value.push(escaped);
                        }
                        c if c.is_control() => {
                            return Err(ParseError::ControlCharInString {
                                offset: at,
                                found: c,
                            })
                        }
                        c => value.push(c),
                    }
                }
                if !closed {
                    return Err(ParseError::UnclosedString { offset });
                }
                push(&mut stack, Expr::Str(value));
            }
            c if is_atom_char(c) => {
                let mut atom = String::from(c);
                while let Some(&(_, next)) = chars.peek() {
                    if !is_atom_char(next) {
                        break;
                    }
                    atom.push(next);
                    chars.next();
                }
                push(&mut stack, Expr::Atom(atom));
            }
            found => return Err(ParseError::UnexpectedChar { offset, found }),
        }
    }
    if stack.len() > 1 {
        let offset = stack.last().map_or(0, |(offset, _)| *offset);
        return Err(ParseError::UnclosedList { offset });
    }
    Ok(stack.pop().map(|(_, items)| items).unwrap_or_default())
}

fn push(stack: &mut [(usize, Vec<Expr>)], expr: Expr) {
    if let Some((_, items)) = stack.last_mut() {
        items.push(expr);
    }
}

fn is_atom_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "*_.:+!?<>=/-".contains(c)
}

/// The names of every `(param "NAME")` in `exprs`, at any depth.
pub fn param_references(exprs: &[Expr]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo: Vec<&Expr> = exprs.iter().collect();
    while let Some(expr) = todo.pop() {
        if let [Expr::Atom(head), Expr::Str(name)] = expr.items() {
            if head == "param" {
                out.insert(name.clone());
            }
        }
        todo.extend(expr.items());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atom(s: &str) -> Expr {
        Expr::Atom(s.to_owned())
    }

    #[test]
    fn parses_nested_lists_strings_and_comments() {
        let parsed =
            parse("; c\n(allow file-read* (subpath (param \"A\"))) ; tail\n(x \"a\\\"b\\\\\")")
                .unwrap();
        assert_eq!(
            parsed,
            vec![
                Expr::List(vec![
                    atom("allow"),
                    atom("file-read*"),
                    Expr::List(vec![
                        atom("subpath"),
                        Expr::List(vec![atom("param"), Expr::Str("A".to_owned())]),
                    ]),
                ]),
                Expr::List(vec![atom("x"), Expr::Str("a\"b\\".to_owned())]),
            ]
        );
        assert_eq!(
            param_references(&parsed).into_iter().collect::<Vec<_>>(),
            ["A"]
        );
    }

    #[test]
    fn refuses_malformed_text() {
        assert_eq!(parse("(a"), Err(ParseError::UnclosedList { offset: 0 }));
        assert_eq!(parse("a)"), Err(ParseError::UnexpectedClose { offset: 1 }));
        assert_eq!(
            parse("(\"a)"),
            Err(ParseError::UnclosedString { offset: 1 })
        );
        assert_eq!(
            parse("\"a\\"),
            Err(ParseError::UnclosedString { offset: 0 })
        );
        assert!(matches!(
            parse("\"\\q\""),
            Err(ParseError::BadEscape { .. })
        ));
        assert!(matches!(
            parse("\"a\nb\""),
            Err(ParseError::ControlCharInString { .. })
        ));
        assert!(matches!(
            parse("#\"re\""),
            Err(ParseError::UnexpectedChar { .. })
        ));
        assert!(matches!(
            parse("(a 'b)"),
            Err(ParseError::UnexpectedChar { .. })
        ));
    }

    #[test]
    fn a_comment_hides_parens() {
        assert_eq!(
            parse("; ) ( \"\n(a)").unwrap(),
            vec![Expr::List(vec![atom("a")])]
        );
    }
}
