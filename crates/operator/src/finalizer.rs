//! The ClusterLink finalizer, kept as kube's `runtime::finalizer` keeps one (JSON patches
//! guarded by a `test` of the list, so another controller's finalizer is never lost or
//! duplicated), with one difference: a new link gets the finalizer and is reconciled in the
//! same pass. kube's helper returns after adding it and waits for the watch to deliver the
//! patched object, a second round trip before the first cloud call; here the object the
//! patch returns goes straight on to the reconcile. The guarantee is the same: no cloud call
//! is made before the finalizer is in place, so a delete always finds it.

use bnerd_api::ClusterLink;
use json_patch::{
    AddOperation, PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

/// What a reconcile does with a link, from its finalizers and deletion timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Live, without our finalizer: add it, then apply.
    AddThenApply,
    /// Live, with our finalizer.
    Apply,
    /// Being deleted, with our finalizer at this index: unwind, then remove it.
    Cleanup(usize),
    /// Being deleted without our finalizer: nothing of ours to do.
    Nothing,
}

/// Pure: the step for `link` with finalizer `name`.
pub fn step(link: &ClusterLink, name: &str) -> Step {
    let index = link.finalizers().iter().position(|f| f == name);
    match (index, link.metadata.deletion_timestamp.is_some()) {
        (None, false) => Step::AddThenApply,
        (Some(_), false) => Step::Apply,
        (Some(i), true) => Step::Cleanup(i),
        (None, true) => Step::Nothing,
    }
}

fn pointer(path: &str) -> PointerBuf {
    // Every path here is a literal or an index: always a valid JSON pointer.
    PointerBuf::parse(path).unwrap_or_default()
}

/// Pure: the patch that adds `name` to the link's finalizers, failing (409/422) when the list
/// changed since `link` was read.
pub fn add_patch(link: &ClusterLink, name: &str) -> json_patch::Patch {
    let now = link.finalizers();
    json_patch::Patch(if now.is_empty() {
        vec![
            PatchOperation::Test(TestOperation {
                path: pointer("/metadata/finalizers"),
                value: serde_json::Value::Null,
            }),
            PatchOperation::Add(AddOperation {
                path: pointer("/metadata/finalizers"),
                value: vec![name].into(),
            }),
        ]
    } else {
        vec![
            PatchOperation::Test(TestOperation {
                path: pointer("/metadata/finalizers"),
                value: now.into(),
            }),
            PatchOperation::Add(AddOperation {
                path: pointer("/metadata/finalizers/-"),
                value: name.into(),
            }),
        ]
    })
}

/// Pure: the patch that removes finalizer `name` at `index`, failing when another entry moved
/// there meanwhile (the next reconcile reads the list again).
pub fn remove_patch(index: usize, name: &str) -> json_patch::Patch {
    let path = format!("/metadata/finalizers/{index}");
    json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: pointer(&path),
            value: name.into(),
        }),
        PatchOperation::Remove(RemoveOperation {
            path: pointer(&path),
        }),
    ])
}

/// Add the finalizer; the link as the apiserver now has it.
pub async fn add(
    api: &Api<ClusterLink>,
    link: &ClusterLink,
    name: &str,
) -> Result<ClusterLink, kube::Error> {
    api.patch(
        &link.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(add_patch(link, name)),
    )
    .await
}

/// Remove the finalizer at `index`: the apiserver may then delete the link.
pub async fn remove(
    api: &Api<ClusterLink>,
    link: &ClusterLink,
    index: usize,
    name: &str,
) -> Result<(), kube::Error> {
    api.patch(
        &link.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(remove_patch(index, name)),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::ClusterLinkSpec;

    fn link(finalizers: &[&str], deleting: bool) -> ClusterLink {
        let mut l = ClusterLink::new("l", ClusterLinkSpec::default());
        if !finalizers.is_empty() {
            l.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        }
        if deleting {
            l.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
        }
        l
    }

    #[test]
    fn the_step_follows_the_finalizer_and_the_deletion() {
        for (finalizers, deleting, want) in [
            (&[][..], false, Step::AddThenApply),
            (&["other"][..], false, Step::AddThenApply),
            (&["ours"][..], false, Step::Apply),
            (&["other", "ours"][..], true, Step::Cleanup(1)),
            (&["other"][..], true, Step::Nothing),
            (&[][..], true, Step::Nothing),
        ] {
            assert_eq!(
                step(&link(finalizers, deleting), "ours"),
                want,
                "{finalizers:?} {deleting}"
            );
        }
    }

    #[test]
    fn the_patches_test_the_list_they_change() {
        let json = |p: json_patch::Patch| serde_json::to_value(p).expect("json");
        assert_eq!(
            json(add_patch(&link(&[], false), "ours")),
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["ours"]},
            ])
        );
        assert_eq!(
            json(add_patch(&link(&["other"], false), "ours")),
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "ours"},
            ])
        );
        assert_eq!(
            json(remove_patch(1, "ours")),
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "ours"},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
    }
}
