//! Untrusted values in messages. A spec field, an annotation, a gateway's status or a cloud's
//! answer can be anything up to megabytes (an apiserver object reaches 1.5 MiB, a Neutron body
//! the client's cap): echoed whole, one would swell a condition past what the apiserver takes
//! (a status patch that fails hides every condition) and an Event past anything readable.
//! Messages show such a value quoted, escaped (NUL, control characters and bidi overrides
//! print as escapes) and shortened; the field it came from is always named beside it.

/// A value is shown up to this many characters, then cut with a note of its full length.
pub const MAX_SHOWN_CHARS: usize = 64;

/// Kubernetes' limit on `Condition.message` (metav1.Condition, `maxLength: 32768`).
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32 * 1024;

/// `value` as a message shows it: Debug-quoted, at most [`MAX_SHOWN_CHARS`] characters of it.
pub fn quoted(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(MAX_SHOWN_CHARS).collect();
    if chars.next().is_none() {
        return format!("{head:?}");
    }
    format!("{head:?}... ({} bytes)", value.len())
}

/// `message` cut to at most `max` bytes on a character boundary, marked as cut.
pub fn truncated(mut message: String, max: usize) -> String {
    const MARK: &str = " [truncated]";
    if message.len() <= max {
        return message;
    }
    let mut end = max.saturating_sub(MARK.len());
    while end > 0 && !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(MARK);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(quoted("10.1.0.0/16"), "\"10.1.0.0/16\"");
        assert_eq!(quoted("a\u{0}b\u{202e}"), "\"a\\0b\\u{202e}\"");
    }

    #[test]
    fn long_values_are_cut_and_measured() {
        let s = "\u{1F4A5}".repeat(1000);
        let q = quoted(&s);
        assert!(q.ends_with("... (4000 bytes)"), "{q}");
        assert_eq!(q.matches('\u{1F4A5}').count(), MAX_SHOWN_CHARS);
    }

    #[test]
    fn messages_are_cut_on_a_character_boundary() {
        let m = "\u{e9}".repeat(100);
        let t = truncated(m.clone(), 51);
        assert!(t.len() <= 51 && t.ends_with(" [truncated]"), "{t}");
        assert_eq!(truncated("short".into(), 51), "short");
        assert!(truncated(m, 3).len() <= 12);
    }
}
