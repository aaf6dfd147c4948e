//! Keystone's application credentials: a handle made from one authenticates on every call,
//! so deleting the credential cuts it off at once, as Keystone's token revocation does.

use bnerd_cloud::{Result, TokenInfo};

use crate::faults::Op;
use crate::policy::is_cloud_admin;
use crate::world::{AppCred, FakeCloud, FakeNeutron, new_id};

/// Keystone 30 bootstrap's implied roles: admin implies manager, manager member, member
/// reader; a token lists the implied ones too (the lab's admin app cred: admin, manager,
/// member, reader).
const IMPLIES: [(&str, &str); 3] = [
    ("admin", "manager"),
    ("manager", "member"),
    ("member", "reader"),
];

impl FakeCloud {
    /// Create an application credential in `project_id` delegating `roles`, plus the roles
    /// they imply as Keystone's bootstrap sets them up. Returns (id, secret).
    pub fn application_credential(&self, project_id: &str, roles: &[&str]) -> (String, String) {
        let mut roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
        for (role, implied) in IMPLIES {
            if roles.iter().any(|r| r == role) && !roles.iter().any(|r| r == implied) {
                roles.push(implied.into());
            }
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
    /// It is cloud admin when its roles are, by Neutron's policy (`admin`, or one of
    /// [`FakeCloud::privileged_roles`]): in Neutron's new defaults admin on any project is
    /// admin of the whole cloud.
    pub fn client_with_app_cred(&self, id: &str, secret: &str) -> FakeNeutron {
        let (project, roles, admin) = {
            let w = self.lock();
            let (project, roles) = w
                .app_creds
                .get(id)
                .map(|ac| (ac.project_id.clone(), ac.roles.clone()))
                .unwrap_or_default();
            let admin = is_cloud_admin(&w, &roles);
            (project, roles, admin)
        };
        FakeNeutron {
            roles,
            admin,
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
