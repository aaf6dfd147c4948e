//! A string that never prints.

use std::fmt;

/// Holds a credential value. `Debug` and `Display` redact, so a secret cannot reach a log,
/// an Event or an error message by formatting.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it (the Keystone request body).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_its_value() {
        let s = SecretString::new("hunter2");
        assert_eq!(
            format!("{s} {s:?} {:?}", Some(&s)),
            "<redacted> <redacted> Some(<redacted>)"
        );
        assert_eq!(s.expose(), "hunter2");
    }
}
