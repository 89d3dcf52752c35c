//! A linear pre-scan that bounds how deeply a YAML or JSON document nests, run before any parser.
//!
//! The YAML parser under `serde_norway` spends time quadratic in nesting depth (its scanner
//! revisits every open level for each token), so a 256 KiB document of `[[[[…]]]]` costs
//! minutes of CPU before any depth check inside the deserializer can fire. This scan costs one
//! pass over the bytes and refuses such a document before the parser sees it.
//!
//! It over-approximates rather than under-approximates: every real nesting level is counted,
//! and a few shapes that are not nesting (a `[` left open in a block plain scalar) may count
//! too. The limits callers pass are far above what any real policy needs, so the slack costs
//! nothing while a missed level could cost the gateway.

/// Deepest nesting accepted in a document from the network.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Where a document first went deeper than allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    /// 1-based line on which the limit was passed.
    pub line: usize,
    pub limit: usize,
}

impl std::fmt::Display for TooDeep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the document nests more than {} levels deep (line {}); at most {} levels are allowed",
            self.limit, self.line, self.limit
        )
    }
}

impl std::error::Error for TooDeep {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

/// Fails when `text`, read as YAML (JSON is YAML's flow syntax), nests more than `limit` levels.
///
/// Counts open flow collections (`[`, `{`) outside quotes and comments, plus the stack of
/// block indentation levels, where each leading `- ` or `? ` indicator on a line opens a level
/// of its own (`- - - x` is three levels on one line).
pub fn check_nesting(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut flow_depth: usize = 0;
    let mut quote = Quote::None;
    // Columns of the open block levels, innermost last.
    let mut block: Vec<usize> = Vec::new();
    // While inside a block scalar (`|` or `>`), lines indented deeper than this are its text.
    let mut block_scalar_parent: Option<usize> = None;

    // libyaml breaks lines on CR, NEL, LS and PS as well as LF, so this scan must too.
    let lines = text.split(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']);
    for (index, line) in lines.enumerate() {
        let line_no = index + 1;
        let too_deep = TooDeep {
            line: line_no,
            limit,
        };
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let rest = &bytes[indent..];
        let blank = rest.iter().all(|b| b.is_ascii_whitespace());

        if let Some(parent) = block_scalar_parent {
            if blank || indent > parent {
                continue;
            }
            block_scalar_parent = None;
        }

        let mut i = indent;
        if quote == Quote::None && flow_depth == 0 {
            if blank || rest.first() == Some(&b'#') {
                continue;
            }
            while block.last().is_some_and(|&col| col > indent) {
                block.pop();
            }
            if block.last() != Some(&indent) {
                block.push(indent);
            }
            // Compact nested collections: each indicator followed by a space opens a level.
            while i < bytes.len() {
                let is_indicator = matches!(bytes[i], b'-' | b'?')
                    && bytes.get(i + 1).is_none_or(|b| *b == b' ' || *b == b'\t');
                if !is_indicator {
                    break;
                }
                i += 1;
                while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                    i += 1;
                }
                block.push(i);
            }
            if block.len() > limit {
                return Err(too_deep);
            }
        }

        let mut prev = b' ';
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Quote::Single => {
                    if b == b'\'' {
                        if bytes.get(i + 1) == Some(&b'\'') {
                            i += 1;
                        } else {
                            quote = Quote::None;
                        }
                    }
                }
                Quote::Double => {
                    if b == b'\\' {
                        i += 1;
                    } else if b == b'"' {
                        quote = Quote::None;
                    }
                }
                Quote::None => match b {
                    b'#' if prev == b' ' || prev == b'\t' => break,
                    b'\'' => quote = Quote::Single,
                    b'"' => quote = Quote::Double,
                    b'[' | b'{' => {
                        flow_depth += 1;
                        if flow_depth + block.len() > limit {
                            return Err(too_deep);
                        }
                    }
                    b']' | b'}' => flow_depth = flow_depth.saturating_sub(1),
                    _ => {}
                },
            }
            prev = b;
            i += 1;
        }

        if quote == Quote::None && flow_depth == 0 && opens_block_scalar(line) {
            block_scalar_parent = Some(indent);
        }
    }
    Ok(())
}

/// True when the line's value is a block scalar header (`key: |`, `- >-`, `|2+ # note`).
fn opens_block_scalar(line: &str) -> bool {
    let content = match line.find(" #") {
        Some(at) => &line[..at],
        None => line,
    }
    .trim_end();
    let header_start = content.rfind([' ', '\t']).map_or(0, |at| at + 1);
    let (before, header) = content.split_at(header_start);
    let mut chars = header.chars();
    let is_header = matches!(chars.next(), Some('|' | '>'))
        && chars.all(|c| c == '-' || c == '+' || c.is_ascii_digit());
    let before = before.trim_end();
    is_header && (before.is_empty() || before.ends_with(':') || before.ends_with('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, limit: usize) -> bool {
        check_nesting(text, limit).is_ok()
    }

    #[test]
    fn flow_nesting_is_counted_and_bounded() {
        let deep = format!("x: {}1{}", "[".repeat(100), "]".repeat(100));
        let err = check_nesting(&deep, MAX_NESTING_DEPTH).unwrap_err();
        assert_eq!(err.line, 1);
        assert_eq!(err.limit, MAX_NESTING_DEPTH);
        let shallow = format!("x: {}1{}", "[".repeat(10), "]".repeat(10));
        assert!(depth_ok(&shallow, MAX_NESTING_DEPTH));
    }

    #[test]
    fn json_objects_count_like_flow_mappings() {
        let deep = format!("{}{}", "{\"a\":".repeat(70), "}".repeat(70));
        assert!(!depth_ok(&deep, MAX_NESTING_DEPTH));
        // The document's root line is one level, then four open collections.
        let json = "{\"a\": {\"b\": [1, 2, {\"c\": 3}]}}";
        assert!(depth_ok(json, 5));
        assert!(!depth_ok(json, 4));
    }

    #[test]
    fn compact_block_sequences_count_each_indicator() {
        let deep = format!("x:\n  {}1\n", "- ".repeat(100));
        assert!(!depth_ok(&deep, MAX_NESTING_DEPTH));
        assert!(depth_ok("x:\n  - - 1\n", 4));
        assert!(!depth_ok("x:\n  - - 1\n", 3));
    }

    #[test]
    fn indentation_levels_are_counted() {
        let mut doc = String::new();
        for level in 0..70 {
            doc.push_str(&" ".repeat(level));
            doc.push_str("k:\n");
        }
        assert!(!depth_ok(&doc, MAX_NESTING_DEPTH));
        // Siblings at one indentation are one level, however many.
        let siblings = "a:\n  b: 1\n  c: 2\n  d: 3\n";
        assert!(depth_ok(siblings, 2));
    }

    #[test]
    fn brackets_in_quotes_comments_and_block_scalars_do_not_count() {
        let text = format!(
            "a: \"{0}\"\nb: '{0}'\nc: 1 # {0}\nd: |\n  {0}\n   {0}\n    more\ne: >-\n      {0}\n",
            "[".repeat(100)
        );
        assert!(depth_ok(&text, 4), "{text}");
    }

    #[test]
    fn escaped_quotes_do_not_end_a_string() {
        let text = format!(
            "a: \"x\\\" {}\"\nb: 'it''s {}'\n",
            "[".repeat(100),
            "{".repeat(100)
        );
        assert!(depth_ok(&text, 4));
    }

    #[test]
    fn the_example_policy_is_well_within_the_limit() {
        let example = include_str!("../../examples/policy.yaml");
        assert!(depth_ok(example, 16));
    }
}
