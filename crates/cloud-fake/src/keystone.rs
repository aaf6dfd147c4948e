//! Keystone's application credentials: a handle made from one authenticates on every call,
//! so deleting the credential cuts it off at once, as Keystone's token revocation does.

use bnerd_cloud::{Result, TokenInfo};

use crate::faults::Op;
use crate::world::{AppCred, FakeCloud, FakeNeutron, new_id};

impl FakeCloud {
    /// Create an application credential in `project_id` delegating `roles` (a member role
    /// implies reader, as Keystone's implied roles do). Returns (id, secret).
    pub fn application_credential(&self, project_id: &str, roles: &[&str]) -> (String, String) {
        let mut roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
        if roles.iter().any(|r| r == "member") && !roles.iter().any(|r| r == "reader") {
            roles.push("reader".into());
        }
        let (id, secret) = (new_id().replace('-', ""), new_id());
        self.lock().app_creds.insert(
            id.clone(),
            AppCred {
                secret: secret.clone(),
                project_id: project_id.into(),
                roles,
            },
        );
        (id, secret)
    }

    /// Delete an application credential; handles made from it fail from now on.
    pub fn revoke_application_credential(&self, id: &str) {
        self.lock().app_creds.remove(id);
    }

    /// A handle that authenticates with an application credential, like `OpenStack::new`
    /// with `AuthMethod::ApplicationCredential`. Unknown credentials fail at the first call.
    pub fn client_with_app_cred(&self, id: &str, secret: &str) -> FakeNeutron {
        let (project, roles) = self
            .lock()
            .app_creds
            .get(id)
            .map(|ac| (ac.project_id.clone(), ac.roles.clone()))
            .unwrap_or_default();
        FakeNeutron {
            roles,
            admin: false,
            app_cred: Some((id.into(), secret.into())),
            ..self.client(&project)
        }
    }
}

impl FakeNeutron {
    pub(crate) async fn token(&self) -> Result<TokenInfo> {
        self.run(Op::TokenInfo, "POST", "/v3/auth/tokens", |_| {
            Ok(TokenInfo {
                project_id: self.project_id.clone(),
                project_name: self.project_id.clone(),
                user_id: format!("user-of-{}", self.project_id),
                roles: self.roles.clone(),
                application_credential_id: self.app_cred.as_ref().map(|(id, _)| id.clone()),
                // Keystone creates application credentials restricted unless told otherwise.
                application_credential_restricted: self.app_cred.as_ref().map(|_| true),
            })
        })
        .await
    }
}
