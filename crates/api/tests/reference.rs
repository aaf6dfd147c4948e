//! docs/crd-reference.md and docs/operations.md against the code, so the two cannot drift:
//! every condition type and each of its reasons, every Event reason, every annotation and
//! every spec/status field path of the generated CRD must be in the reference; the reference
//! may name no reason the code cannot set; and no reason is spelled as a string literal in
//! the product code outside the one list of them (`ConditionType::reasons`, `EventReason`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bnerd_api::names::{ANNOTATION_ABANDON, ANNOTATION_API_ACCESS, FINALIZER};
use bnerd_api::{ConditionType, EventReason, Reason};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn reference() -> String {
    read("docs/crd-reference.md")
}

/// Words of the document in backticks: `X` (the reference names every identifier that way).
fn quoted(doc: &str) -> BTreeSet<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_string())
        .collect()
}

/// The reasons table of one condition: the rows under its `### <Type>` heading, up to the
/// next heading. Each row starts with the reason in backticks: | `Reason` | ... |
fn documented_reasons(doc: &str, t: ConditionType) -> Vec<String> {
    let heading = format!("### `{t}`");
    let Some(start) = doc.find(&heading) else {
        panic!("docs/crd-reference.md has no heading {heading:?}");
    };
    let body = &doc[start + heading.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(r, _)| r.to_string()))
        .collect()
}

#[test]
fn every_condition_and_each_of_its_reasons_has_a_row() {
    let doc = reference();
    for t in ConditionType::ALL {
        let documented = documented_reasons(&doc, *t);
        let code: Vec<String> = t.reasons().iter().map(|r| r.to_string()).collect();
        for r in &code {
            assert!(
                documented.contains(r),
                "docs/crd-reference.md: condition {t} can carry reason {r} (ConditionType::reasons), but its table has no row | `{r}` |"
            );
        }
        for r in &documented {
            assert!(
                code.contains(r),
                "docs/crd-reference.md: the table of {t} documents reason {r}, which the code never sets on {t} (ConditionType::reasons)"
            );
        }
    }
}

#[test]
fn the_reference_names_no_reason_the_code_cannot_set() {
    let doc = reference();
    let known: BTreeSet<String> = Reason::ALL
        .iter()
        .map(|r| r.to_string())
        .chain(EventReason::ALL.iter().map(|r| r.to_string()))
        .collect();
    // Every row of every reason table, and every row of the Events table.
    let heading = "## Events";
    let Some(events) = doc.find(heading) else {
        panic!("docs/crd-reference.md has no heading {heading:?}");
    };
    let body = &doc[events + heading.len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    let event_rows: Vec<String> = body[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(r, _)| r.to_string()))
        .collect();
    for r in &event_rows {
        assert!(
            known.contains(r),
            "docs/crd-reference.md: the Events table names {r}, which is neither a Reason nor an EventReason"
        );
    }
    for e in EventReason::ALL {
        assert!(
            event_rows.contains(&e.to_string()),
            "docs/crd-reference.md: Event reason {e} (EventReason) has no row in the Events table"
        );
    }
}

#[test]
fn the_operations_guide_explains_every_event() {
    let ops = read("docs/operations.md");
    let words = quoted(&ops);
    for e in EventReason::ALL {
        assert!(
            words.contains(e.as_str()),
            "docs/operations.md never names Event reason `{e}`"
        );
    }
}

#[test]
fn annotations_and_finalizer_are_documented() {
    let words = quoted(&reference());
    for a in [ANNOTATION_API_ACCESS, ANNOTATION_ABANDON, FINALIZER] {
        assert!(
            words.iter().any(|w| w.contains(a)),
            "docs/crd-reference.md never names `{a}`"
        );
    }
}

/// Every field path under `prefix` in an openAPIV3Schema node: spec.transitIP,
/// status.reverseRoutes[].gatewayRef.kind, ...
fn field_paths(node: &serde_yaml::Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = node.get("properties").and_then(|p| p.as_mapping()) {
        for (k, v) in props {
            let Some(k) = k.as_str() else { continue };
            let path = format!("{prefix}.{k}");
            out.push(path.clone());
            field_paths(v, &path, out);
        }
    }
    if let Some(items) = node.get("items") {
        field_paths(items, &format!("{prefix}[]"), out);
    }
}

fn crd_schema() -> serde_yaml::Value {
    let text = read("charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml");
    let crd: serde_yaml::Value = match serde_yaml::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("the generated CRD does not parse: {e}"),
    };
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn every_field_of_the_generated_crd_is_documented() {
    let schema = crd_schema();
    let mut paths = vec![];
    for top in ["spec", "status"] {
        field_paths(&schema["properties"][top], top, &mut paths);
    }
    assert!(
        paths
            .iter()
            .any(|p| p == "status.reverseRoutes[].gatewayRef.kind"),
        "the walk reaches nested fields: {paths:?}"
    );
    let words = quoted(&reference());
    for p in &paths {
        assert!(
            words.contains(p),
            "docs/crd-reference.md never names the CRD field `{p}`"
        );
    }
}

#[test]
fn every_cel_rule_and_schema_bound_is_quoted() {
    let doc = reference();
    let schema = crd_schema();
    let rules = schema["properties"]["spec"]["x-kubernetes-validations"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        rules.len(),
        5,
        "the CRD carries the five CEL rules of docs/crd-reference.md"
    );
    // And the rules on single fields (spec.customerProjectID's shape).
    let field_rules: Vec<_> = schema["properties"]["spec"]["properties"]
        .as_mapping()
        .into_iter()
        .flatten()
        .filter_map(|(_, node)| node["x-kubernetes-validations"].as_sequence().cloned())
        .flatten()
        .collect();
    assert!(
        !field_rules.is_empty(),
        "spec.customerProjectID carries its CEL rule"
    );
    for r in rules.iter().chain(&field_rules) {
        for key in ["rule", "message"] {
            let text = r[key].as_str().unwrap_or_default();
            assert!(
                doc.contains(text),
                "docs/crd-reference.md does not quote the CEL {key} exactly: {text}"
            );
        }
    }
    let spec = &schema["properties"]["spec"]["properties"];
    for (field, node) in spec.as_mapping().into_iter().flatten() {
        let field = field.as_str().unwrap_or_default();
        for bound in ["minLength", "maxLength"] {
            if let Some(n) = node[bound].as_u64() {
                let row = doc
                    .lines()
                    .find(|l| l.starts_with(&format!("| `spec.{field}` |")))
                    .unwrap_or_else(|| panic!("no field row for spec.{field}"));
                assert!(
                    row.contains(&format!("{bound}: {n}")),
                    "docs/crd-reference.md: the row of spec.{field} does not say `{bound}: {n}`: {row}"
                );
            }
        }
    }
}

/// The lines of the product code under `dirs` (tests and comments left out), trimmed, with
/// where each is.
fn product_lines(dirs: &[&str]) -> Vec<(String, String)> {
    let mut out = vec![];
    for path in files_under(dirs, &["rs"]) {
        // A module's tests in a file of their own (`#[cfg(test)] #[path = "x_tests.rs"]`).
        if path.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            let at = format!(
                "{}:{}",
                path.strip_prefix(root()).unwrap_or(&path).display(),
                n + 1
            );
            out.push((code.to_string(), at));
        }
    }
    out
}

/// Capitalised words in string literals of the product code (tests and comments left out),
/// with where they are.
fn literals() -> Vec<(String, String)> {
    let mut out = vec![];
    let dirs = [
        "crates/api/src",
        "crates/engine/src",
        "crates/operator/src",
        "crates/cli/src",
    ];
    for (code, at) in product_lines(&dirs) {
        // Raw strings (the CRD's printer columns are JSON).
        if code.contains("r#\"") {
            continue;
        }
        for (i, piece) in code.split('"').enumerate() {
            let word = !piece.is_empty()
                && piece.starts_with(|c: char| c.is_ascii_uppercase())
                && piece.chars().all(|c| c.is_ascii_alphanumeric());
            if i % 2 == 1 && word {
                out.push((piece.to_string(), at.clone()));
            }
        }
    }
    out
}

/// Capitalised string literals the product code may spell that are no reason: Kubernetes
/// kinds and condition statuses, printer columns, Event actions, derive names, output words.
const NOT_REASONS: &[&str] = &[
    "True",
    "False",
    "Unknown",
    "ClusterLink",
    "ClusterLinkStatus",
    "IPsecGateway",
    "VPNGateway",
    "Pod",
    "Lease",
    "Reconcile",
    // The Secret type the credentials contract asks for.
    "Opaque",
    // The Event actions of DriftRepaired (one series per kind), listed in its row of the
    // reference; the test below checks they are.
    "RestoreGatewayRoute",
    "ReattachLeg",
    "RecreateLegPort",
    "ShareTransitNetwork",
    "RestoreReverseRoutes",
    "FabricCheck",
    "Default",
    "PartialEq",
    "GET",
    "PUT",
    "POST",
    "HOSTNAME",
    "PROBLEM",
    "WARNING",
];

#[test]
fn no_reason_is_spelled_outside_its_list() {
    let names: BTreeSet<String> = Reason::ALL
        .iter()
        .map(|r| r.to_string())
        .chain(EventReason::ALL.iter().map(|r| r.to_string()))
        .chain(ConditionType::ALL.iter().map(|t| t.to_string()))
        .collect();
    let mut stray = vec![];
    for (word, at) in literals() {
        if names.contains(&word) {
            stray.push(format!(
                "{at}: \"{word}\" is a condition type or reason spelled as a string; use ConditionType/Reason/EventReason"
            ));
        } else if !NOT_REASONS.contains(&word.as_str()) {
            stray.push(format!(
                "{at}: \"{word}\": if it is a condition or Event reason, add it to Reason (and ConditionType::reasons) or EventReason and document it in docs/crd-reference.md; if not, add it to NOT_REASONS in crates/api/tests/reference.rs"
            ));
        }
    }
    assert!(stray.is_empty(), "{}", stray.join("\n"));
}

/// The crates that make Events: the engine says what happened, the operator publishes.
const EVENT_MAKERS: &[&str] = &["crates/engine/src", "crates/operator/src"];

/// Every Event the reference documents is one the code makes: its reason spelled as
/// `EventReason::<X>` by the product code (not in the table that maps an action kind to its
/// reason), or an action of that kind made (`Action::new(ActionKind::<X>, …)`). An Event
/// the code never makes is a promise to an admin that nothing keeps.
#[test]
fn every_documented_event_is_made_by_the_code() {
    let lines = product_lines(EVENT_MAKERS);
    let mut never = vec![];
    for e in EventReason::ALL {
        let reason = format!("EventReason::{e}");
        let kind = format!("ActionKind::{e}");
        let made = lines.iter().any(|(code, _)| {
            let mapping = code.contains("=>");
            (code.contains(&reason) && !mapping)
                || code == &format!("{kind},")
                || code.contains(&format!("Action::new({kind},"))
        });
        if !made {
            never.push(format!(
                "Event reason {e} is documented (EventReason) but no product code under {EVENT_MAKERS:?} makes it (EventReason::{e}, or Action::new(ActionKind::{e}, …))"
            ));
        }
    }
    assert!(never.is_empty(), "{}", never.join("\n"));
}

/// Actions are the Events of what a step did: a list of them made only to be dropped
/// (`&mut vec![]` handed to a step) silences Events the reference promises, as an unwind
/// that took a customer transit down once did.
#[test]
fn no_step_is_handed_a_list_of_actions_to_drop() {
    let dropped: Vec<String> = product_lines(EVENT_MAKERS)
        .into_iter()
        .filter(|(code, _)| code.contains("&mut vec![]") || code.contains("&mut Vec::new()"))
        .map(|(code, at)| {
            format!(
                "{at}: {code}: hand the step a list the caller reports (its actions are Events)"
            )
        })
        .collect();
    assert!(dropped.is_empty(), "{}", dropped.join("\n"));
}

#[test]
fn drift_event_actions_are_documented() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/crd-reference.md"),
    )
    .expect("docs/crd-reference.md");
    for action in [
        "RestoreGatewayRoute",
        "ReattachLeg",
        "RecreateLegPort",
        "ShareTransitNetwork",
        "RestoreReverseRoutes",
    ] {
        assert!(
            doc.contains(&format!("`{action}`")),
            "{action} is not in docs/crd-reference.md"
        );
    }
}

/// The repository's sources whose comments a reader meets: Rust, shell and Python under
/// crates/, lab/ and image/, and the scripts at the top.
fn commented_sources() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["test.sh", "demo.sh", ".ci/run"]
        .iter()
        .map(|f| root().join(f))
        .filter(|p| p.is_file())
        .collect();
    out.extend(files_under(
        &["crates", "lab", "image"],
        &["rs", "sh", "py"],
    ));
    out
}

/// Every file under these directories of the repository whose name ends in one of `exts`,
/// hidden directories and build output left out.
fn files_under(dirs: &[&str], exts: &[&str]) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut dirs: Vec<PathBuf> = dirs.iter().map(|d| root().join(d)).collect();
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
                continue;
            }
            if path
                .extension()
                .is_some_and(|x| exts.iter().any(|e| x == *e))
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The comment on one line, without its marker: a whole-line comment, or one after code
/// outside a string (an even number of `"` before it). `#!` lines are no comment.
fn comment_of(line: &str, rust: bool) -> Option<&str> {
    let marker = if rust { "//" } else { "#" };
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix(marker) {
        if !rust && rest.starts_with('!') {
            return None;
        }
        return Some(rest.trim_start_matches(['/', '!', '#']));
    }
    let spaced = format!(" {marker} ");
    let at = line.find(&spaced)?;
    line[..at]
        .matches('"')
        .count()
        .is_multiple_of(2)
        .then(|| &line[at + spaced.len()..])
}

/// One run of consecutive comment lines, joined by spaces (a citation may break across
/// lines), with the source line each piece starts at.
struct Block {
    text: String,
    /// (offset in `text`, line number), in order.
    lines: Vec<(usize, usize)>,
}

impl Block {
    /// The source line of the text at `offset`.
    fn line_at(&self, offset: usize) -> usize {
        self.lines
            .iter()
            .take_while(|(at, _)| *at <= offset)
            .last()
            .map_or(0, |(_, n)| *n)
    }

    /// Up to 160 characters of the text from `offset`, for a message.
    fn excerpt(&self, offset: usize) -> String {
        self.text[offset..].chars().take(160).collect()
    }
}

/// Every comment of a file, as blocks.
fn comment_blocks(path: &Path) -> Vec<Block> {
    let rust = path.extension().is_some_and(|x| x == "rs");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out: Vec<Block> = vec![];
    let mut open = false;
    for (n, line) in text.lines().enumerate() {
        match comment_of(line, rust) {
            Some(c) => {
                let c = c.trim();
                match out.last_mut() {
                    Some(b) if open => {
                        b.text.push(' ');
                        b.lines.push((b.text.len(), n + 1));
                        b.text.push_str(c);
                    }
                    _ => out.push(Block {
                        text: c.to_string(),
                        lines: vec![(0, n + 1)],
                    }),
                }
                // A comment after code ends its block: the next line starts another.
                open = line.trim_start().starts_with(if rust { "//" } else { "#" });
            }
            None => open = false,
        }
    }
    out
}

/// The headings of a document in docs/, as a citation names them: without the `#`s, a
/// leading "N. " and backticks.
fn headings(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .map(|l| {
            let h = l.trim_start_matches('#').trim();
            let h = match h.split_once(". ") {
                Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
                _ => h,
            };
            h.replace('`', "")
        })
        .collect()
}

/// Each `docs/<file>.md, "<section>"` a comment cites, as (offset, file, section).
fn citations(comment: &str) -> Vec<(usize, String, String)> {
    let mut out = vec![];
    for (at, _) in comment.match_indices("docs/") {
        let rest = &comment[at + "docs/".len()..];
        let Some((file, after)) = rest.split_once(".md, \"") else {
            continue;
        };
        if file.is_empty() || !file.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        if let Some((section, _)) = after.split_once('"') {
            out.push((at, format!("docs/{file}.md"), section.to_string()));
        }
    }
    out
}

/// What a comment may not cite, and where: documents a reader of this repository does not
/// have.
fn foreign_citation(comment: &str) -> Option<(&'static str, usize)> {
    let lower = comment.to_lowercase();
    let first = |hits: &mut dyn Iterator<Item = usize>| hits.min();
    let design = first(
        &mut ["DESIGN.md", "DESIGN §"]
            .iter()
            .filter_map(|p| comment.find(p))
            .chain(comment.match_indices("DESIGN ").filter_map(|(i, m)| {
                comment[i + m.len()..]
                    .starts_with(|c: char| c.is_ascii_digit())
                    .then_some(i)
            })),
    );
    if let Some(at) = design {
        return Some((
            "the design notes outside the repository (cite docs/design.md by section)",
            at,
        ));
    }
    let seed = first(
        &mut [
            "(seed:",
            "seed: \"",
            "seed's",
            "seeds/",
            "000_a3a03054628afcfc",
        ]
        .iter()
        .filter_map(|p| lower.find(p)),
    );
    if let Some(at) = seed {
        return Some((
            "the product specification's source file (cite docs/ by section)",
            at,
        ));
    }
    let issue = lower.match_indices("issue").find_map(|(i, m)| {
        let after = lower[i + m.len()..].trim_start_matches('s');
        let after = after.trim_start().trim_start_matches('#');
        after.starts_with(|c: char| c.is_ascii_digit()).then_some(i)
    });
    let hash = lower.match_indices('#').find_map(|(i, _)| {
        let before_ok = lower[..i]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || c == '(');
        (before_ok && lower[i + 1..].starts_with(|c: char| c.is_ascii_digit())).then_some(i)
    });
    if let Some(at) = issue.or(hash) {
        return Some(("an issue number", at));
    }
    lower
        .find("/work/")
        .map(|at| ("a path outside the repository", at))
}

/// Comments cite what a reader of this repository has: a section of docs/ that exists, never
/// an issue number, the design notes kept outside, or the product specification's source file.
#[test]
fn comments_cite_sections_the_docs_have() {
    let mut docs: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    let mut bad = vec![];
    for path in commented_sources() {
        let shown = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for block in comment_blocks(&path) {
            for (at, file, section) in citations(&block.text) {
                let known = docs.entry(file.clone()).or_insert_with(|| {
                    std::fs::read_to_string(root().join(&file))
                        .map(|d| headings(&d))
                        .unwrap_or_default()
                });
                if !known.contains(&section) {
                    bad.push(format!(
                        "{shown}:{}: cites {file}, \"{section}\", which has no heading ## {section} or ### {section}",
                        block.line_at(at)
                    ));
                }
            }
            if let Some((what, at)) = foreign_citation(&block.text) {
                bad.push(format!(
                    "{shown}:{}: cites {what}: {}",
                    block.line_at(at),
                    block.excerpt(at)
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_citation_scanner_reads_what_it_should() {
    let heads = headings("# T\n## 7. Delete a link\n### `Ready`\n## The lab's Neutrons\n");
    for h in ["Delete a link", "Ready", "The lab's Neutrons"] {
        assert!(heads.contains(h), "{h}: {heads:?}");
    }
    assert_eq!(
        citations("see docs/design.md, \"The resync\"; docs/operations.md, \"Upgrade\" too"),
        vec![
            (4, "docs/design.md".to_string(), "The resync".to_string()),
            (34, "docs/operations.md".to_string(), "Upgrade".to_string()),
        ]
    );
    assert_eq!(comment_of("    /// a doc", true), Some(" a doc"));
    assert_eq!(comment_of("let x = 1; // why", true), Some("why"));
    assert_eq!(comment_of("let u = \"http://x // y\";", true), None);
    assert_eq!(comment_of("#!/usr/bin/env bash", false), None);
    assert_eq!(comment_of("  # why", false), Some(" why"));
    // Assembled, so that these fixtures are not themselves citations a reader would follow.
    let (design, seed, issue) = ("DESIGN", "seed", "issue");
    for bad in [
        format!("as {design}.md section 4 says"),
        format!("({design} 6.5)"),
        format!("({seed}: \"Rotation\")"),
        format!("the {seed}'s table"),
        format!("({issue} 10, item 3)"),
        "Issue 8 item 6".to_string(),
        "see #12".to_string(),
    ] {
        assert!(foreign_citation(&bad).is_some(), "{bad}");
    }
    for fine in [
        "a fresh seed each run, printed",
        "The lab sample's seed: `BNERD_CRASH_SEED`",
        "docs/design.md, \"The resync\"",
        "#[cfg(test)] and ${#arr[@]}",
        "an issue with the cloud",
    ] {
        assert_eq!(foreign_citation(fine), None, "{fine}");
    }
}
