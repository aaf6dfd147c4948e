//! What each command prints, as text for a person or as one JSON document for a script
//! (`--output json`). The JSON shapes are stable: fields are only ever added.
//!
//! Much of what is printed was written by someone else: condition messages, names, IDs and
//! descriptions from the cloud. Text goes through [`safe`] field by field (a control
//! character prints as its escape, so a newline in a message cannot forge a report line and
//! an ESC cannot drive the terminal); JSON keeps every value as it is and escapes the
//! characters a terminal would act on ([`json_line`]).

use std::borrow::Cow;

use bnerd_api::echo::{shell_word, terminal_safe, unsafe_on_terminal};
use bnerd_cloud::RbacPolicy;
use serde_json::{Value, json};

use crate::doctor::Report;

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// A value printed as text on a terminal.
pub fn safe(text: &str) -> Cow<'_, str> {
    terminal_safe(text)
}

/// `doctor`: every finding, how many are problems and warnings, and why the cloud checks did
/// not run when they could not.
pub fn doctor(format: Format, report: &Report) -> String {
    let findings = &report.findings;
    let problems = findings.iter().filter(|f| f.problem).count();
    let warnings = findings.iter().filter(|f| f.warning).count();
    match format {
        Format::Text => {
            let mut out = String::new();
            for f in findings {
                let tag = match (f.problem, f.warning) {
                    (true, _) => "PROBLEM",
                    (false, true) => "WARNING",
                    (false, false) => "ok     ",
                };
                out.push_str(&format!("{tag} {}\n", safe(&f.text)));
            }
            let warned = if warnings > 0 {
                format!(", {warnings} warning(s)")
            } else {
                String::new()
            };
            match &report.unchecked {
                None => out.push_str(&format!("{problems} problem(s){warned}\n")),
                Some(why) => {
                    out.push_str(&format!("UNCHECKED cloud: {}\n", safe(why)));
                    out.push_str(&format!(
                        "{problems} problem(s){warned} in what could be checked; the cloud was not checked\n"
                    ));
                }
            }
            out
        }
        Format::Json => json_line(&json!({
            "findings": findings
                .iter()
                .map(|f| json!({"problem": f.problem, "warning": f.warning, "text": f.text}))
                .collect::<Vec<_>>(),
            "problems": problems,
            "warnings": warnings,
            "unchecked": report.unchecked,
        })),
    }
}

/// What `decommission-share` did (or would do, without `--yes`), or why it refused.
pub enum ShareOutcome<'a> {
    Policies(&'a [RbacPolicy]),
    /// As `Policies`, for a project whose links are all `PerCustomer` (named): they did not
    /// hold the share back.
    PerCustomer {
        policies: &'a [RbacPolicy],
        links: &'a [String],
    },
    Refused(String),
}

impl<'a> ShareOutcome<'a> {
    /// What `decommission_share` returned.
    pub fn of(done: &'a Result<crate::share::Decommission, crate::share::ShareError>) -> Self {
        match done {
            Ok(d) if d.per_customer.is_empty() => Self::Policies(&d.policies),
            Ok(d) => Self::PerCustomer {
                policies: &d.policies,
                links: &d.per_customer,
            },
            Err(e) => Self::Refused(e.to_string()),
        }
    }
}

pub fn share(
    format: Format,
    network: &str,
    project: &str,
    applied: bool,
    outcome: &ShareOutcome<'_>,
) -> String {
    let (policies, per_customer): (&[RbacPolicy], &[String]) = match outcome {
        ShareOutcome::Policies(p) => (p, &[]),
        ShareOutcome::PerCustomer { policies, links } => (policies, links),
        ShareOutcome::Refused(_) => (&[], &[]),
    };
    match format {
        Format::Text => {
            let mut out = String::new();
            if !per_customer.is_empty() {
                out.push_str(&format!(
                    "project {}'s ClusterLink(s) {} are PerCustomer: their legs stand on the project's customer transit, not on network {}, so they do not need this share\n",
                    safe(project),
                    safe(&per_customer.join(", ")),
                    safe(network)
                ));
            }
            out.push_str(&share_text(network, project, applied, outcome, policies));
            out
        }
        Format::Json => {
            let refused = match outcome {
                ShareOutcome::Refused(why) => json!(why),
                _ => Value::Null,
            };
            json_line(&json!({
                "network": network,
                "project": project,
                "applied": applied && !matches!(outcome, ShareOutcome::Refused(_)),
                "policies": policies
                    .iter()
                    .map(|p| json!({"id": p.id, "action": p.action}))
                    .collect::<Vec<_>>(),
                "perCustomerLinks": per_customer,
                "refused": refused,
            }))
        }
    }
}

/// `decommission-share`'s lines about the rules themselves.
fn share_text(
    network: &str,
    project: &str,
    applied: bool,
    outcome: &ShareOutcome<'_>,
    policies: &[RbacPolicy],
) -> String {
    match (outcome, policies) {
        (ShareOutcome::Refused(why), _) => format!("refused: {}\n", safe(why)),
        (_, []) => format!(
            "no RBAC share of network {} with project {} is visible to the operator credential (one an admin made is not: openstack network rbac list --target-project {})\n",
            safe(network),
            safe(project),
            shell_word(project)
        ),
        (_, policies) => {
            let verb = if applied { "deleted" } else { "would delete" };
            let mut out = String::new();
            for p in policies {
                out.push_str(&format!(
                    "{verb} RBAC policy {} ({} of network {} with project {})\n",
                    safe(&p.id),
                    safe(&p.action),
                    safe(network),
                    safe(project)
                ));
            }
            if !applied {
                out.push_str("dry run: add --yes to delete\n");
            }
            out
        }
    }
}

/// How `recreate` ended: Ready (with its address), not Ready in time (the condition where it
/// stopped), or refused (why).
pub fn recreated(
    format: Format,
    name: &str,
    done: &Result<crate::recreate::Recreated, String>,
) -> String {
    let name_ = safe(name);
    match format {
        Format::Text => {
            let mut out = match done {
                Ok(r) if r.ready => format!(
                    "ClusterLink {name_} recreated: Ready at {}\n",
                    safe(r.transit_ip.as_deref().unwrap_or("?"))
                ),
                Ok(r) => format!(
                    "ClusterLink {name_} recreated but not Ready yet: {}\n",
                    safe(r.stuck.as_deref().unwrap_or("?"))
                ),
                Err(e) => format!("refused: {}\n", safe(e)),
            };
            if let Ok(r) = done {
                for a in &r.dropped_annotations {
                    out.push_str(&format!("{}\n", crate::recreate::dropped_line(a)));
                }
                // Last: what is left to do once the move is done.
                if let Some(share) = &r.share {
                    out.push_str(&format!("{}\n", safe(&share.line(name))));
                }
            }
            out
        }
        Format::Json => json_line(&match done {
            Ok(r) => json!({
                "name": name, "recreated": true, "ready": r.ready,
                "transitIP": r.transit_ip, "stuck": r.stuck, "refused": Value::Null,
                "droppedAnnotations": r.dropped_annotations,
                "transitShare": r.share.as_ref().map(transit_share),
            }),
            Err(e) => json!({
                "name": name, "recreated": false, "ready": false,
                "transitIP": Value::Null, "stuck": Value::Null, "refused": e,
                "droppedAnnotations": [], "transitShare": Value::Null,
            }),
        }),
    }
}

/// After a move to `PerCustomer`, as JSON: the project, its `Shared` links still holding the
/// share (null when they could not be listed, `unchecked` says why), and the command that
/// removes the share once none does.
fn transit_share(s: &crate::recreate::ShareAfterMove) -> Value {
    use crate::recreate::ShareAfterMove;
    let (shared, unchecked) = match s {
        ShareAfterMove::LeftBehind { .. } => (json!([]), Value::Null),
        ShareAfterMove::StillNeeded { shared, .. } => (json!(shared), Value::Null),
        ShareAfterMove::Unknown { why, .. } => (Value::Null, json!(why)),
    };
    json!({
        "project": s.project(),
        "sharedLinks": shared,
        "decommission": s.decommission(),
        "unchecked": unchecked,
    })
}

/// `plan`: the writes in order, the conditions the reconcile would leave, hints.
pub fn plan(format: Format, p: &crate::plan::Plan) -> String {
    use crate::plan::Released;
    match format {
        Format::Text => {
            let what = match p.deleting {
                Some(_) => "unwind plan",
                None => "plan",
            };
            let mut out = format!(
                "{what} for ClusterLink {} (read from the cloud now; nothing written):\n",
                safe(&p.name)
            );
            if p.writes.is_empty() {
                out.push_str(match p.deleting {
                    Some(_) => "  no writes: nothing of the link is left in the cloud\n",
                    None => "  no writes: the cloud already matches\n",
                });
            }
            for line in plan_lines(p) {
                out.push_str(&format!("  {}\n", safe(&line)));
            }
            out.push_str("then:\n");
            match p.deleting {
                Some(Released::Yes) => {
                    out.push_str("  the finalizer is removed and the ClusterLink goes\n")
                }
                Some(Released::No) => {
                    out.push_str("  the finalizer stays until what is below is fixed\n")
                }
                Some(Released::Abandoned) => out.push_str(
                    "  the abandon annotation releases the ClusterLink: its customer side stays behind (docs/operations.md, \"Delete a link\")\n",
                ),
                None => {}
            }
            for c in &p.conditions {
                out.push_str(&format!(
                    "  {}={} {}: {}\n",
                    safe(&c.type_),
                    safe(&c.status),
                    safe(&c.reason),
                    safe(&c.message)
                ));
            }
            for h in &p.hints {
                out.push_str(&format!("hint: {}\n", safe(h)));
            }
            out
        }
        Format::Json => json_line(&json!({
            "name": p.name,
            "writes": plan_lines(p),
            "deleting": p.deleting.map(|r| json!({
                "released": r != Released::No,
                "abandoned": r == Released::Abandoned,
            })),
            "conditions": p.conditions.iter().map(|c| json!({
                "type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
            })).collect::<Vec<_>>(),
            "ready": p.ready,
            "hints": p.hints,
        })),
    }
}

/// Each write as a plan line; a cross-tenant link's name their credential, as its failures do.
fn plan_lines(p: &crate::plan::Plan) -> Vec<String> {
    p.writes
        .iter()
        .zip(&p.credentials)
        .map(|(w, c)| match p.cross_tenant {
            true => format!("{}: {w}", c.as_str()),
            false => w.to_string(),
        })
        .collect()
}

/// A usage or configuration error (exit 2): on stderr as text, and with `--output json` also
/// as `{"error": …}` on stdout, so a script reading stdout sees why there is no report.
pub fn error(format: Format, message: &str) -> Option<String> {
    match format {
        Format::Text => None,
        Format::Json => Some(json_line(&json!({ "error": message }))),
    }
}

/// One JSON document and a newline. serde_json escapes C0 controls; DEL, the C1 controls
/// (0x9b acts as ESC [ on some terminals) and the bidi controls pass through it raw, so they
/// are written as `\uXXXX` too: the same string to a JSON reader, inert on a terminal. They
/// can only occur inside strings, where that escape is valid.
fn json_line(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if unsafe_on_terminal(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Finding;

    fn findings() -> Vec<Finding> {
        vec![
            Finding {
                problem: false,
                warning: false,
                text: "ClusterLink a: Ready".into(),
            },
            Finding {
                problem: true,
                warning: false,
                text: "ClusterLink b: not Ready".into(),
            },
        ]
    }

    #[test]
    fn doctor_as_text_and_json() {
        let report = Report {
            findings: findings(),
            unchecked: None,
        };
        let text = doctor(Format::Text, &report);
        assert_eq!(
            text,
            "ok      ClusterLink a: Ready\nPROBLEM ClusterLink b: not Ready\n1 problem(s)\n"
        );
        let v: Value = serde_json::from_str(&doctor(Format::Json, &report)).unwrap();
        assert_eq!(v["problems"], 1);
        assert_eq!(v["findings"][1]["problem"], true);
        assert_eq!(v["findings"][1]["text"], "ClusterLink b: not Ready");
        assert!(v["unchecked"].is_null(), "{v}");
    }

    #[test]
    fn doctor_says_what_it_could_not_check() {
        let report = Report {
            findings: findings(),
            unchecked: Some("Keystone could not be reached".into()),
        };
        let text = doctor(Format::Text, &report);
        assert!(
            text.ends_with(
                "PROBLEM ClusterLink b: not Ready\nUNCHECKED cloud: Keystone could not be reached\n1 problem(s) in what could be checked; the cloud was not checked\n"
            ),
            "{text}"
        );
        let v: Value = serde_json::from_str(&doctor(Format::Json, &report)).unwrap();
        assert_eq!(v["unchecked"], "Keystone could not be reached");
        assert_eq!(v["problems"], 1);
    }

    /// A condition message (or a description, an ID) with a newline cannot forge a report
    /// line, nor an ESC or a bidi override drive the terminal: text shows their escapes;
    /// JSON keeps the value and escapes what serde_json would leave raw.
    #[test]
    fn what_others_wrote_reaches_the_terminal_inert() {
        let hostile = "ClusterLink c: not Ready, m\nok      all fine\u{1b}[2K\u{9b}31m\u{202e}";
        let report = Report {
            findings: vec![
                Finding {
                    problem: true,
                    warning: false,
                    text: hostile.into(),
                },
                Finding {
                    problem: false,
                    warning: true,
                    text: "ClusterLink d: annotation".into(),
                },
            ],
            unchecked: None,
        };
        let text = doctor(Format::Text, &report);
        assert_eq!(
            text,
            "PROBLEM ClusterLink c: not Ready, m\\nok      all fine\\u{1b}[2K\\u{9b}31m\\u{202e}\nWARNING ClusterLink d: annotation\n1 problem(s), 1 warning(s)\n"
        );
        let json = doctor(Format::Json, &report);
        assert!(
            !json.contains(['\u{1b}', '\u{9b}', '\u{202e}']) && json.contains("\\u009b"),
            "{json}"
        );
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["findings"][0]["text"], hostile);
        assert_eq!(v["findings"][1]["warning"], true);
        assert_eq!(
            (v["problems"].as_u64(), v["warnings"].as_u64()),
            (Some(1), Some(1))
        );

        let p = crate::plan::Plan {
            name: "n".into(),
            writes: vec![],
            credentials: vec![],
            cross_tenant: false,
            deleting: None,
            conditions: vec![crate::plan::PlannedCondition {
                type_: "LegAttached".into(),
                status: "False".into(),
                reason: "R".into(),
                message: "x\u{1b}]0;title\u{7}".into(),
            }],
            ready: false,
            hints: vec!["h\rhidden".into()],
        };
        let t = plan(Format::Text, &p);
        assert!(
            t.contains("x\\u{1b}]0;title\\u{7}\n") && t.contains("hint: h\\rhidden\n"),
            "{t}"
        );
    }

    /// A cross-tenant plan names each write's credential; an unwind plan says whether the
    /// finalizer goes.
    #[test]
    fn plan_names_credentials_and_the_unwinds_end() {
        use bnerd_engine::overlay::{PlannedWrite, Whose};
        let p = crate::plan::Plan {
            name: "c".into(),
            writes: vec![
                PlannedWrite::RemoveRoutes {
                    router_id: "gw".into(),
                    routes: vec![bnerd_cloud::Route {
                        destination: "10.9.0.0/16".into(),
                        nexthop: "10.254.0.7".into(),
                    }],
                },
                PlannedWrite::Detach {
                    router_id: "r".into(),
                    port_id: "p".into(),
                },
            ],
            credentials: vec![Whose::Operator, Whose::Customer],
            cross_tenant: true,
            deleting: Some(crate::plan::Released::Yes),
            conditions: vec![],
            ready: false,
            hints: vec![],
        };
        let t = plan(Format::Text, &p);
        assert!(t.starts_with("unwind plan for ClusterLink c"), "{t}");
        assert!(
            t.contains("  operator credential: remove route")
                && t.contains("  customer credential: detach port p from router r"),
            "{t}"
        );
        assert!(t.contains("the finalizer is removed"), "{t}");
        let v: Value = serde_json::from_str(&plan(Format::Json, &p)).unwrap();
        assert_eq!(v["deleting"]["released"], true);
        assert!(
            v["writes"][1]
                .as_str()
                .unwrap()
                .starts_with("customer credential: detach")
        );
    }

    /// recreate says which annotation it did not carry over, as text and as JSON.
    #[test]
    fn recreate_names_the_dropped_annotation() {
        let done = Ok(crate::recreate::Recreated {
            ready: true,
            stuck: None,
            transit_ip: Some("10.254.0.4".into()),
            dropped_annotations: vec![bnerd_api::names::ANNOTATION_ABANDON.into()],
            share: None,
        });
        let t = recreated(Format::Text, "l", &done);
        assert!(
            t.starts_with("ClusterLink l recreated: Ready at 10.254.0.4\n")
                && t.contains(
                    "annotation ipsec.bnerd.net/abandon-customer-resources is not carried over"
                ),
            "{t}"
        );
        let v: Value = serde_json::from_str(&recreated(Format::Json, "l", &done)).unwrap();
        assert_eq!(
            v["droppedAnnotations"],
            json!(["ipsec.bnerd.net/abandon-customer-resources"])
        );
        assert!(v["transitShare"].is_null(), "{v}");
        let v: Value =
            serde_json::from_str(&recreated(Format::Json, "l", &Err("no".into()))).unwrap();
        assert_eq!(v["droppedAnnotations"], json!([]));
        assert!(v["transitShare"].is_null(), "{v}");
    }

    /// A move of the project's last Shared link ends with the command that removes the
    /// share, after everything else, as text and as JSON; while other Shared links hold it,
    /// they are named and no command is offered as JSON.
    #[test]
    fn recreate_ends_with_the_share_left_behind() {
        use crate::recreate::{Recreated, ShareAfterMove};
        let done = |share| {
            Ok(Recreated {
                ready: true,
                stuck: None,
                transit_ip: Some("10.255.0.5".into()),
                dropped_annotations: vec![bnerd_api::names::ANNOTATION_ABANDON.into()],
                share: Some(share),
            })
        };
        let left = done(ShareAfterMove::LeftBehind {
            project: "p1".into(),
        });
        let t = recreated(Format::Text, "l", &left);
        let last = t.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("ClusterLink l was project p1's last Shared link")
                && last.ends_with("kubectl clusterlink decommission-share --project p1 --yes"),
            "{t}"
        );
        let v: Value = serde_json::from_str(&recreated(Format::Json, "l", &left)).unwrap();
        assert_eq!(
            v["transitShare"],
            json!({"project": "p1", "sharedLinks": [], "unchecked": null,
                "decommission": "kubectl clusterlink decommission-share --project p1 --yes"})
        );
        let kept = done(ShareAfterMove::StillNeeded {
            project: "p1".into(),
            shared: vec!["b".into()],
        });
        let t = recreated(Format::Text, "l", &kept);
        assert!(t.contains("still has Shared ClusterLink(s) b"), "{t}");
        let v: Value = serde_json::from_str(&recreated(Format::Json, "l", &kept)).unwrap();
        assert_eq!(v["transitShare"]["sharedLinks"], json!(["b"]));
        assert!(v["transitShare"]["decommission"].is_null(), "{v}");
    }

    #[test]
    fn share_as_json() {
        let p = RbacPolicy {
            id: "r1".into(),
            object_type: "network".into(),
            object_id: "n".into(),
            action: "access_as_shared".into(),
            target_tenant: "p".into(),
            project_id: "o".into(),
        };
        let ps = [p];
        let v: Value = serde_json::from_str(&share(
            Format::Json,
            "n",
            "p",
            false,
            &ShareOutcome::Policies(&ps),
        ))
        .unwrap();
        assert_eq!(v["applied"], false);
        assert_eq!(v["policies"][0]["id"], "r1");
        assert!(v["refused"].is_null());
        let v: Value = serde_json::from_str(&share(
            Format::Json,
            "n",
            "p",
            true,
            &ShareOutcome::Refused("still needed".into()),
        ))
        .unwrap();
        assert_eq!(v["applied"], false);
        assert_eq!(v["refused"], "still needed");
        let t = share(Format::Text, "n", "p", false, &ShareOutcome::Policies(&ps));
        assert!(
            t.contains("would delete RBAC policy r1") && t.contains("dry run"),
            "{t}"
        );
        assert!(!t.contains("PerCustomer"), "{t}");
        assert_eq!(v["perCustomerLinks"], json!([]));

        // A project whose links are all PerCustomer: they are named, the share goes.
        let links = ["x".to_string()];
        let outcome = ShareOutcome::PerCustomer {
            policies: &ps,
            links: &links,
        };
        let t = share(Format::Text, "n", "p", true, &outcome);
        assert!(
            t.starts_with("project p's ClusterLink(s) x are PerCustomer: their legs stand on the project's customer transit, not on network n")
                && t.contains("deleted RBAC policy r1"),
            "{t}"
        );
        let v: Value =
            serde_json::from_str(&share(Format::Json, "n", "p", true, &outcome)).unwrap();
        assert_eq!(v["applied"], true);
        assert_eq!(v["perCustomerLinks"], json!(["x"]));
        assert_eq!(v["policies"][0]["id"], "r1");
    }

    #[test]
    fn errors_as_json_only_when_asked() {
        assert_eq!(error(Format::Text, "x"), None);
        let v: Value =
            serde_json::from_str(&error(Format::Json, "IPSEC_X is not set").unwrap()).unwrap();
        assert_eq!(v["error"], "IPSEC_X is not set");
    }
}
