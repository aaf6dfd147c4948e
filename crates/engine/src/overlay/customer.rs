//! A cross-tenant link's credential source with its customer clients under overlays beside
//! an operator's ([`Overlay::beside`]): the Secret is read as the source reads it, the client
//! it makes answers the customer side's reads, and its writes join the operator overlay's list
//! (recorded for a plan, made and recorded for a tap). What the source remembers of a
//! credential (`CredentialSource::checked`) it remembers here too.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::SecretRef;

use super::Overlay;
use crate::credentials::{Checked, CredentialSource, CustomerCloud};
use crate::plan::tenant::CustomerCredential;

/// `source`, its clients beside `operator_side`.
pub struct CustomerSide<'a, 'b> {
    source: &'a dyn CredentialSource,
    operator_side: &'a Overlay<'b>,
}

impl<'a, 'b> CustomerSide<'a, 'b> {
    pub fn beside(operator_side: &'a Overlay<'b>, source: &'a dyn CredentialSource) -> Self {
        Self {
            source,
            operator_side,
        }
    }
}

#[async_trait]
impl CredentialSource for CustomerSide<'_, '_> {
    async fn secret(&self, r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        self.source.secret(r).await
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        Arc::new(self.operator_side.beside(self.source.client(c)))
    }

    // What the source found out about a credential holds for its clients here too: a
    // resync's dry run asks the customer's cloud what a live reconcile would, no more.
    fn checked(&self, c: &CustomerCredential) -> Option<Checked> {
        self.source.checked(c)
    }

    fn remember(&self, c: &CustomerCredential, checked: Checked) {
        self.source.remember(c, checked);
    }
}
