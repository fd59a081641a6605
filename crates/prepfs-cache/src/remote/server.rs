//! The connections to the tier's server: the URL's forms (one server, or a cluster's nodes),
//! the client of each, a connection that routes a cluster's pipeline by node, and the URL as
//! shown (its password redacted).

use super::{Access, CLUSTER_RETRIES, TIMEOUT};

/// The schemes of a Redis Cluster URL (`redis+cluster://HOST:PORT,HOST:PORT,...`; with TLS,
/// `rediss+cluster://`), each with its nodes' scheme.
pub(super) const CLUSTER_SCHEMES: [(&str, &str); 2] = [("redis+cluster://", "redis://"), ("rediss+cluster://", "rediss://")];

/// The server(s) a `cache.remote.url` names, each as a `redis://` URL the client accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerUrls {
    /// `redis[s]://[USER:PASSWORD@]HOST:PORT[/DB]`.
    Single(String),
    /// `redis[s]+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,...`: the seed nodes
    /// (credentials apply to each).
    Cluster(Vec<String>),
}

/// Parses a `cache.remote.url` (the one place its form is decided; the config checks it here).
pub fn server_urls(url: &str) -> Result<ServerUrls, String> {
    if let Some((rest, scheme)) = CLUSTER_SCHEMES.iter().find_map(|(cluster, node)| url.strip_prefix(cluster).map(|rest| (rest, node))) {
        let (auth, hosts) = match rest.rfind('@') {
            Some(at) => (&rest[..=at], &rest[at + 1..]),
            None => ("", rest),
        };
        let nodes: Vec<String> = hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(|h| format!("{scheme}{auth}{h}")).collect();
        if nodes.is_empty() {
            return Err("a cluster URL names its nodes: redis+cluster://HOST:PORT,HOST:PORT,...".into());
        }
        for node in &nodes {
            if node[scheme.len()..].contains('/') {
                return Err("a cluster has no databases: no /DB after a node".into());
            }
            redis::Client::open(node.as_str()).map_err(|e| format!("node `{}`: {e}", prepfs_base::escape::redacted(node)))?;
        }
        return Ok(ServerUrls::Cluster(nodes));
    }
    if !url.starts_with("redis://") && !url.starts_with("rediss://") {
        return Err("a single server's URL, redis://HOST:PORT[/DB] (rediss:// for TLS), or a cluster's, redis+cluster://HOST:PORT,HOST:PORT,... (rediss+cluster:// for TLS)".into());
    }
    redis::Client::open(url).map_err(|e| e.to_string())?;
    Ok(ServerUrls::Single(url.to_string()))
}

/// The client of the tier's server: one server, or a cluster.
pub(super) enum Server {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

impl Server {
    pub(super) fn open(url: &str, access: &Access) -> Result<Server, String> {
        let certs = || redis::TlsCertificates { client_tls: None, root_cert: access.tls_ca.clone() };
        Ok(match server_urls(url)? {
            ServerUrls::Single(url) => {
                let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| e.to_string())?;
                if let Some(password) = &access.password {
                    let settings = info.redis_settings().clone().set_password(password);
                    info = info.set_redis_settings(settings);
                }
                let client = match access.tls_ca {
                    Some(_) => redis::Client::build_with_tls(info, certs()),
                    None => redis::Client::open(info),
                };
                Server::Single(client.map_err(|e| e.to_string())?)
            }
            ServerUrls::Cluster(nodes) => {
                let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
                    .connection_timeout(TIMEOUT)
                    .response_timeout(TIMEOUT)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(10)
                    .max_retry_wait(50);
                if let Some(password) = &access.password {
                    builder = builder.password(password);
                }
                if access.tls_ca.is_some() {
                    builder = builder.certs(certs());
                }
                Server::Cluster(builder.build().map_err(|e| e.to_string())?)
            }
        })
    }

    /// A new connection, every call on it bounded by [`TIMEOUT`].
    pub(super) fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Server::Single(client) => {
                let conn = client.get_connection_with_timeout(TIMEOUT)?;
                conn.set_read_timeout(Some(TIMEOUT))?;
                conn.set_write_timeout(Some(TIMEOUT))?;
                Ok(Conn::Single(conn))
            }
            Server::Cluster(client) => Ok(Conn::Cluster(Box::new(client.get_connection()?))),
        }
    }
}

/// A connection to the tier: to one server, or to a cluster (one per node inside, routed by
/// slot). Single commands go through [`redis::ConnectionLike`]; a pipeline of writes through
/// [`Conn::set_nx_all`], which a cluster splits by node.
pub(super) enum Conn {
    Single(redis::Connection),
    /// Boxed: a cluster connection (with its TLS settings) is several times a single one.
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    /// `SET key value NX` for each item, in one pipeline (one per node in a cluster): each
    /// reply in order (`Nil` where the key existed).
    pub(super) fn set_nx_all(&mut self, items: &[(&[u8], Vec<u8>)]) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Conn::Single(c) => {
                let mut pipe = redis::pipe();
                for (key, value) in items {
                    pipe.cmd("SET").arg(*key).arg(&value[..]).arg("NX");
                }
                pipe.query(c)
            }
            Conn::Cluster(c) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for (key, value) in items {
                    pipe.cmd("SET").arg(*key).arg(&value[..]).arg("NX");
                }
                pipe.query(c)
            }
        }
    }
}

impl redis::ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => c.req_command(cmd),
            Conn::Cluster(c) => c.req_command(cmd),
        }
    }
    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
    fn check_connection(&mut self) -> bool {
        match self {
            Conn::Single(c) => c.check_connection(),
            Conn::Cluster(c) => c.check_connection(),
        }
    }
    fn is_open(&self) -> bool {
        match self {
            Conn::Single(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        }
    }
}



impl Conn {
    /// `cmds` in one pipeline (a cluster splits it by node): each reply in order.
    pub(super) fn pipeline(&mut self, cmds: Vec<redis::Cmd>) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Conn::Single(c) => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query(c)
            }
            Conn::Cluster(c) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query(c)
            }
        }
    }
}
