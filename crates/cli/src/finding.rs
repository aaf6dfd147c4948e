//! One line of a `doctor` report, shared by the checks that produce lines (`doctor`,
//! `bounds`, `customer_transits`).

/// One line of the report: fine, a problem (exit 1), or a warning: nothing is wrong yet,
/// but something is set that needs a person's attention before it does harm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub problem: bool,
    pub warning: bool,
    pub text: String,
}

impl Finding {
    pub(crate) fn ok(text: String) -> Self {
        Self {
            problem: false,
            warning: false,
            text,
        }
    }

    pub(crate) fn problem(text: String) -> Self {
        Self {
            problem: true,
            warning: false,
            text,
        }
    }

    pub fn warning(text: String) -> Self {
        Self {
            problem: false,
            warning: true,
            text,
        }
    }
}
