//! What each command prints, as text for a person or as one JSON document for a script
//! (`--output json`). The JSON shapes are stable: fields are only ever added.

use bnerd_cloud::RbacPolicy;
use serde_json::{Value, json};

use crate::doctor::Report;

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// `doctor`: every finding, how many are problems, and why the cloud checks did not run
/// when they could not.
pub fn doctor(format: Format, report: &Report) -> String {
    let findings = &report.findings;
    let problems = findings.iter().filter(|f| f.problem).count();
    match format {
        Format::Text => {
            let mut out = String::new();
            for f in findings {
                let tag = if f.problem { "PROBLEM" } else { "ok     " };
                out.push_str(&format!("{tag} {}\n", f.text));
            }
            match &report.unchecked {
                None => out.push_str(&format!("{problems} problem(s)\n")),
                Some(why) => {
                    out.push_str(&format!("UNCHECKED cloud: {why}\n"));
                    out.push_str(&format!(
                        "{problems} problem(s) in what could be checked; the cloud was not checked\n"
                    ));
                }
            }
            out
        }
        Format::Json => json_line(&json!({
            "findings": findings
                .iter()
                .map(|f| json!({"problem": f.problem, "text": f.text}))
                .collect::<Vec<_>>(),
            "problems": problems,
            "unchecked": report.unchecked,
        })),
    }
}

/// What `decommission-share` did (or would do, without `--yes`), or why it refused.
pub enum ShareOutcome<'a> {
    Policies(&'a [RbacPolicy]),
    Refused(String),
}

pub fn share(
    format: Format,
    network: &str,
    project: &str,
    applied: bool,
    outcome: &ShareOutcome<'_>,
) -> String {
    match format {
        Format::Text => match outcome {
            ShareOutcome::Refused(why) => format!("refused: {why}\n"),
            ShareOutcome::Policies([]) => format!(
                "no RBAC share of network {network} with project {project} is visible to the operator credential (one an admin made is not: openstack network rbac list --target-project {project})\n"
            ),
            ShareOutcome::Policies(policies) => {
                let verb = if applied { "deleted" } else { "would delete" };
                let mut out = String::new();
                for p in *policies {
                    out.push_str(&format!(
                        "{verb} RBAC policy {} ({} of network {network} with project {project})\n",
                        p.id, p.action
                    ));
                }
                if !applied {
                    out.push_str("dry run: add --yes to delete\n");
                }
                out
            }
        },
        Format::Json => {
            let (policies, refused) = match outcome {
                ShareOutcome::Policies(p) => (
                    p.iter()
                        .map(|p| json!({"id": p.id, "action": p.action}))
                        .collect::<Vec<_>>(),
                    Value::Null,
                ),
                ShareOutcome::Refused(why) => (vec![], json!(why)),
            };
            json_line(&json!({
                "network": network,
                "project": project,
                "applied": applied && matches!(outcome, ShareOutcome::Policies(_)),
                "policies": policies,
                "refused": refused,
            }))
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
    match format {
        Format::Text => match done {
            Ok(r) if r.ready => format!(
                "ClusterLink {name} recreated: Ready at {}\n",
                r.transit_ip.as_deref().unwrap_or("?")
            ),
            Ok(r) => format!(
                "ClusterLink {name} recreated but not Ready yet: {}\n",
                r.stuck.as_deref().unwrap_or("?")
            ),
            Err(e) => format!("refused: {e}\n"),
        },
        Format::Json => json_line(&match done {
            Ok(r) => json!({
                "name": name, "recreated": true, "ready": r.ready,
                "transitIP": r.transit_ip, "stuck": r.stuck, "refused": Value::Null,
            }),
            Err(e) => json!({
                "name": name, "recreated": false, "ready": false,
                "transitIP": Value::Null, "stuck": Value::Null, "refused": e,
            }),
        }),
    }
}

/// `plan`: the writes in order, the conditions the reconcile would leave, hints.
pub fn plan(format: Format, p: &crate::plan::Plan) -> String {
    match format {
        Format::Text => {
            let mut out = format!(
                "plan for ClusterLink {} (read from the cloud now; nothing written):\n",
                p.name
            );
            if p.writes.is_empty() {
                out.push_str("  no writes: the cloud already matches\n");
            }
            for w in &p.writes {
                out.push_str(&format!("  {w}\n"));
            }
            out.push_str("then:\n");
            for c in &p.conditions {
                out.push_str(&format!(
                    "  {}={} {}: {}\n",
                    c.type_, c.status, c.reason, c.message
                ));
            }
            for h in &p.hints {
                out.push_str(&format!("hint: {h}\n"));
            }
            out
        }
        Format::Json => json_line(&json!({
            "name": p.name,
            "writes": p.writes.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "conditions": p.conditions.iter().map(|c| json!({
                "type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
            })).collect::<Vec<_>>(),
            "ready": p.ready,
            "hints": p.hints,
        })),
    }
}

/// A usage or configuration error (exit 2): on stderr as text, and with `--output json` also
/// as `{"error": …}` on stdout, so a script reading stdout sees why there is no report.
pub fn error(format: Format, message: &str) -> Option<String> {
    match format {
        Format::Text => None,
        Format::Json => Some(json_line(&json!({ "error": message }))),
    }
}

fn json_line(v: &Value) -> String {
    format!("{v}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Finding;

    fn findings() -> Vec<Finding> {
        vec![
            Finding {
                problem: false,
                text: "ClusterLink a: Ready".into(),
            },
            Finding {
                problem: true,
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
    }

    #[test]
    fn errors_as_json_only_when_asked() {
        assert_eq!(error(Format::Text, "x"), None);
        let v: Value =
            serde_json::from_str(&error(Format::Json, "IPSEC_X is not set").unwrap()).unwrap();
        assert_eq!(v["error"], "IPSEC_X is not set");
    }
}
