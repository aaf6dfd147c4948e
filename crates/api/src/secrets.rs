//! A credentials Secret's keys and values as the operator and `plan` read them: `data`, with
//! `stringData` on top (an object that was never round-tripped through the apiserver, such
//! as one a test or a manifest hands over, may carry it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

/// Where [`secret_data`] puts the Secret's `type`: a key no Secret can have (its data keys
/// are letters, digits, `-`, `_` and `.`), so the type travels with the data to the contract
/// check without a second read of the Secret.
pub const TYPE_KEY: &str = "@type";

/// The Secret type the credentials contract asks for.
pub const OPAQUE: &str = "Opaque";

/// The Secret's keys and their bytes, and its `type` under [`TYPE_KEY`] (unset is `Opaque`,
/// as the apiserver defaults it).
pub fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let type_ = secret.type_.clone().unwrap_or_else(|| OPAQUE.to_string());
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    data.insert(TYPE_KEY.to_string(), type_.into_bytes());
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn string_data_goes_over_data() {
        let s = Secret {
            data: Some(
                [
                    ("a".to_string(), ByteString(b"1".to_vec())),
                    ("b".to_string(), ByteString(b"2".to_vec())),
                ]
                .into(),
            ),
            string_data: Some([("b".to_string(), "3".to_string())].into()),
            ..Default::default()
        };
        let d = secret_data(s.clone());
        assert_eq!(d["a"], b"1");
        assert_eq!(d["b"], b"3");
        // The type travels along; unset reads as the apiserver's default.
        assert_eq!(d[TYPE_KEY], b"Opaque");
        let typed = Secret {
            type_: Some("kubernetes.io/basic-auth".into()),
            ..s
        };
        assert_eq!(secret_data(typed)[TYPE_KEY], b"kubernetes.io/basic-auth");
    }
}
