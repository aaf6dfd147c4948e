//! Untrusted values in messages. A spec field, an annotation, a gateway's status or a cloud's
//! answer can be anything up to megabytes (an apiserver object reaches 1.5 MiB, a Neutron body
//! the client's cap): echoed whole, one would swell a condition past what the apiserver takes
//! (a status patch that fails hides every condition) and an Event past anything readable.
//! Messages show such a value quoted, escaped (NUL, control characters and bidi overrides
//! print as escapes) and shortened; the field it came from is always named beside it.
//! A command printed for a person to paste (an operator message, `kubectl clusterlink`)
//! carries each such value as one shell word ([`shell_word`]), and whatever the CLI prints
//! on a terminal goes through [`terminal_safe`].

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

/// Whether `c` must not reach a terminal as it is: control characters (C0, DEL, C1; ESC
/// starts terminal escape sequences, a newline would forge a line of a report) and the
/// bidirectional controls that make text read otherwise than it is.
pub fn unsafe_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` as a terminal may show it: every control or bidi character printed as its escape
/// (`\n`, `\u{1b}`, `\u{202e}`), everything else as it is.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unsafe_on_terminal) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_on_terminal(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `value` as one word of a POSIX shell command printed for a person to paste: as it is
/// when it is made only of characters no shell treats specially (every OpenStack and
/// Kubernetes ID, CIDR and address), else in single quotes (a `'` inside as `'\''`), so
/// nothing in it runs, expands or splits. Control and bidi characters are shown as escapes
/// first (see [`terminal_safe`]): the word then names a value that does not exist, and the
/// pasted command fails instead of doing what hidden characters made it look like.
pub fn shell_word(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !value.is_empty() && value.chars().all(plain) && !value.starts_with('-') {
        return value.to_string();
    }
    format!("'{}'", terminal_safe(value).replace('\'', r"'\''"))
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
    fn plain_ids_stay_bare_everything_else_is_single_quoted() {
        for plain in [
            "0123456789abcdef0123456789abcdef",
            "c0ffee00-1111-4222-8333-444455556666",
            "10.254.0.0/16",
            "destination=10.1.0.0/16,gateway=10.254.0.3",
            "shoot--services--svc01",
        ] {
            assert_eq!(shell_word(plain), plain);
        }
        for (value, word) in [
            ("", "''"),
            ("a b", "'a b'"),
            ("$(reboot)", "'$(reboot)'"),
            ("`id`;rm -rf ~", "'`id`;rm -rf ~'"),
            ("it's", r"'it'\''s'"),
            ("-rf", "'-rf'"),
            ("x\ny", r"'x\ny'"),
            ("\u{1b}[2Jdone", r"'\u{1b}[2Jdone'"),
            ("ab\u{202e}cd", r"'ab\u{202e}cd'"),
        ] {
            assert_eq!(shell_word(value), word, "{value:?}");
        }
    }

    /// What a POSIX shell makes of the quoted word is the value itself, one word.
    #[test]
    fn a_shell_reads_the_quoted_word_back_as_the_value() {
        for value in [
            "a b",
            "$(touch /nonexistent/x)",
            "it's 'x'",
            "*",
            "a\"b",
            "-n",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s|' {}", shell_word(value)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{value}|"));
        }
    }

    #[test]
    fn terminals_get_escapes_not_control_characters() {
        assert_eq!(terminal_safe("plain text: ok"), "plain text: ok");
        assert_eq!(
            terminal_safe("a\nok      forged\u{1b}[31m\u{9b}\u{202e}z"),
            r"a\nok      forged\u{1b}[31m\u{9b}\u{202e}z"
        );
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
