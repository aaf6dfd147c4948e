//! A small HTTP/1.1 server on loopback for the client's tests: it plays Keystone and Neutron
//! as each test's handler says, records every connection and request, and can misbehave in
//! the ways a real server (or something posing as one) can.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bnerd_cloud::{AuthConfig, AuthMethod, OpenStack, SecretString};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// The token the server hands out: recognisable, so a test can check no message carries it.
pub const TOKEN: &str = "tok-7f3a9c-must-never-leak";
/// The password the client sends: recognisable for the same reason.
pub const PASSWORD: &str = "pw-51d2e8-must-never-leak";

const TOKEN_BODY: &str = r#"{"token": {"expires_at": "2099-01-01T00:00:00Z", "project": {"id": "p", "name": "p"}, "user": {"id": "u", "name": "u"}, "roles": [{"id": "r", "name": "member"}], "catalog": []}}"#;

#[derive(Debug, Clone)]
pub struct Request {
    /// Connection number, from 1.
    pub conn: usize,
    /// e.g. `GET /v2.0/ports?limit=2 HTTP/1.1`
    pub line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn method(&self) -> &str {
        self.line.split(' ').next().unwrap_or_default()
    }

    /// Path and query.
    pub fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or_default()
    }

    pub fn query(&self, key: &str) -> Option<String> {
        let (_, q) = self.target().split_once('?')?;
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    }

    /// `http://<Host>`: how Neutron builds its links (from the Host header it was sent).
    pub fn origin(&self) -> String {
        format!("http://{}", self.header("host").unwrap_or_default())
    }
}

pub enum Reply {
    /// A status line's tail (`200 OK`), extra headers, and a body sent with Content-Length.
    Full {
        status: &'static str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A chunked body of `total` bytes, written 64 KiB at a time for as long as the client
    /// reads; `Seen::streamed` counts what got written.
    Chunked { status: &'static str, total: usize },
    /// Close the connection without answering, as a server closing a kept-alive one does.
    Drop,
}

impl Reply {
    pub fn json(status: &'static str, body: impl Into<String>) -> Self {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into().into_bytes(),
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        if let Reply::Full { headers, .. } = &mut self {
            headers.push((k.into(), v.into()));
        }
        self
    }
}

/// Keystone's answer to a token request, or None for any other request.
pub fn keystone(req: &Request) -> Option<Reply> {
    req.line
        .starts_with("POST /v3/auth/tokens")
        .then(|| Reply::json("201 Created", TOKEN_BODY).header("X-Subject-Token", TOKEN))
}

#[derive(Default)]
pub struct Seen {
    pub connections: usize,
    pub requests: Vec<Request>,
    /// Requests (by request line prefix) to answer by dropping the connection, once each.
    pub drop_once: Vec<String>,
    /// Body bytes written by `Reply::Chunked` answers.
    pub streamed: usize,
    /// TLS handshakes that failed (the client refused our certificate, say).
    pub tls_failures: usize,
}

type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

pub struct Server {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Seen>>,
    scheme: &'static str,
}

impl Server {
    pub async fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Server {
        Self::listen(handler, None).await
    }

    /// The same server behind TLS with `cert`: what the client sees of a cloud whose proxy
    /// terminates TLS (the handler still builds links as `http://<Host>`, as Neutron does
    /// there).
    pub async fn start_tls(
        cert: &ServerCert,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Server {
        Self::listen(handler, Some(TlsAcceptor::from(cert.config.clone()))).await
    }

    async fn listen(
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
        tls: Option<TlsAcceptor>,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(serve(listener, seen.clone(), Arc::new(handler), tls));
        Server { addr, seen, scheme }
    }

    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// A client whose Keystone and Neutron are both this server.
    pub fn client(&self) -> OpenStack {
        client(&self.url(), &self.url())
    }

    /// `client` with this username, which a handler can tell apart in the token request.
    pub fn client_as(&self, username: &str) -> OpenStack {
        client_as(&self.url(), &self.url(), username)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// (connection, request line) of every Neutron request.
    pub fn neutron_requests(&self) -> Vec<(usize, String)> {
        self.requests()
            .into_iter()
            .filter(|r| r.line.contains("/v2.0/"))
            .map(|r| (r.conn, r.line))
            .collect()
    }

    pub fn drop_once(&self, line_prefix: &str) {
        self.seen.lock().unwrap().drop_once.push(line_prefix.into());
    }
}

/// A password client on `keystone` (its `/v3`) with Neutron at `neutron`.
pub fn client(keystone: &str, neutron: &str) -> OpenStack {
    client_as(keystone, neutron, "u")
}

pub fn client_as(keystone: &str, neutron: &str, username: &str) -> OpenStack {
    OpenStack::new(auth_config(keystone, username))
        .unwrap()
        .with_neutron_url(neutron)
}

/// The password credential these tests use, on `keystone` (its `/v3`), with default TLS.
pub fn auth_config(keystone: &str, username: &str) -> AuthConfig {
    AuthConfig {
        auth_url: format!("{keystone}/v3"),
        region: None,
        interface: "public".into(),
        method: AuthMethod::Password {
            username: username.into(),
            password: SecretString::new(PASSWORD.to_string()),
            user_domain_name: "Default".into(),
            project_id: Some("p".into()),
            project_name: None,
            project_domain_name: "Default".into(),
        },
        tls: Default::default(),
    }
}

async fn serve(
    listener: TcpListener,
    seen: Arc<Mutex<Seen>>,
    handler: Handler,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        // Head and body go out in separate writes; with Nagle on, the second waits for the
        // client's delayed ACK (40 ms a request), which a thousand-page test notices.
        let _ = sock.set_nodelay(true);
        let n = {
            let mut s = seen.lock().unwrap();
            s.connections += 1;
            s.connections
        };
        let (seen, handler) = (seen.clone(), handler.clone());
        match tls.clone() {
            None => {
                tokio::spawn(connection(sock, n, seen, handler));
            }
            Some(acceptor) => {
                tokio::spawn(async move {
                    match acceptor.accept(sock).await {
                        Ok(stream) => connection(stream, n, seen, handler).await,
                        Err(_) => seen.lock().unwrap().tls_failures += 1,
                    }
                });
            }
        }
    }
}

/// Keep-alive until the client goes away; never closes an idle connection itself, so any
/// second connection is the client's choice.
async fn connection(
    sock: impl AsyncRead + AsyncWrite + Send + 'static,
    n: usize,
    seen: Arc<Mutex<Seen>>,
    handler: Handler,
) {
    let (r, mut w) = tokio::io::split(sock);
    let mut r = BufReader::new(r);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_string();
        let mut headers = vec![];
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).await.is_err() {
            return;
        }
        let req = Request {
            conn: n,
            line: line.clone(),
            headers,
            body,
        };
        let drop_it = {
            let mut s = seen.lock().unwrap();
            s.requests.push(req.clone());
            match s
                .drop_once
                .iter()
                .position(|p| line.starts_with(p.as_str()))
            {
                Some(i) => {
                    s.drop_once.remove(i);
                    true
                }
                None => false,
            }
        };
        if drop_it {
            return;
        }
        match handler(&req) {
            Reply::Drop => return,
            Reply::Full {
                status,
                headers,
                body,
            } => {
                let mut head = format!("HTTP/1.1 {status}\r\n");
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
                if w.write_all(head.as_bytes()).await.is_err() || w.write_all(&body).await.is_err()
                {
                    return;
                }
            }
            Reply::Chunked { status, total } => {
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                );
                if w.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let block = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < total {
                    let len = block.len().min(total - sent);
                    let frame = format!("{len:x}\r\n");
                    if w.write_all(frame.as_bytes()).await.is_err()
                        || w.write_all(&block[..len]).await.is_err()
                        || w.write_all(b"\r\n").await.is_err()
                    {
                        return;
                    }
                    sent += len;
                    seen.lock().unwrap().streamed += len;
                }
                if w.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A CA made for one test, and what it signs.
pub struct TestCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// A server certificate and key, ready for a TLS listener.
pub struct ServerCert {
    pub config: Arc<rustls::ServerConfig>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        TestCa {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's PEM into `dir` and returns the path, as OS_CACERT takes it.
    pub fn write_pem(&self, dir: &std::path::Path) -> std::path::PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("ca.pem");
        std::fs::write(&path, self.pem()).unwrap();
        path
    }

    /// A server certificate for these names (DNS names or IP addresses).
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), self.issuer.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        ServerCert {
            config: Arc::new(config),
        }
    }
}
