//! A credentials Secret's keys and values as the operator and `plan` read them: `data`, with
//! `stringData` on top (an object that was never round-tripped through the apiserver, such
//! as one a test or a manifest hands over, may carry it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

/// The Secret's keys and their bytes.
pub fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
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
        let d = secret_data(s);
        assert_eq!(d["a"], b"1");
        assert_eq!(d["b"], b"3");
    }
}
