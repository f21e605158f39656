//! A real `redis-server` for a test.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{encode_userinfo, free_port, read_log, stop_child, START_TIMEOUT};

/// How [`RedisServer::start_with`] configures the server. TLS is always off.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// `requirepass`: clients must `AUTH` with this password (the `default`
    /// user). `None`: no authentication.
    pub password: Option<String>,
    /// Further lines for redis.conf, such as `"maxclients 10"`.
    pub config: Vec<String>,
}

/// A `redis-server` on a free loopback port, its files in a temporary
/// directory; it is stopped when dropped.
///
/// It persists nothing (`save ""`, `appendonly no`): a restart starts empty.
pub struct RedisServer {
    port: u16,
    password: Option<String>,
    dir: TempDir,
    child: Option<Child>,
}

/// A reply of the server, as [`RedisServer::command`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisReply {
    /// `+OK`
    Simple(String),
    /// `-ERR …`
    Error(String),
    /// `:1`
    Integer(i64),
    /// `$3\r\nfoo`
    Bulk(Vec<u8>),
    /// `*2\r\n…`
    Array(Vec<RedisReply>),
    /// `$-1` or `*-1`
    Nil,
}

impl RedisServer {
    /// Starts a server without a password and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(RedisOptions::default())
    }

    /// Starts a server configured by `options` and waits until it answers PING.
    pub fn start_with(options: RedisOptions) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("wasmgate-redis-")
            .tempdir()
            .expect("creating a temporary directory for redis-server");
        let port = free_port();
        let mut conf = format!(
            "# Written by wasmgate-testkit.\n\
             port {port}\n\
             bind 127.0.0.1\n\
             dir {}\n\
             save \"\"\n\
             appendonly no\n\
             daemonize no\n\
             logfile \"\"\n",
            quote(&dir.path().to_string_lossy()),
        );
        if let Some(password) = &options.password {
            conf.push_str(&format!("requirepass {}\n", quote(password)));
        }
        for line in &options.config {
            conf.push_str(line);
            conf.push('\n');
        }
        std::fs::write(dir.path().join("redis.conf"), conf).expect("writing redis.conf");
        let mut server = RedisServer {
            port,
            password: options.password,
            dir,
            child: None,
        };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:PORT/0`, with `:PASSWORD@` if it has a password.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!(
                "redis://:{}@127.0.0.1:{}/0",
                encode_userinfo(password),
                self.port
            ),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The directory with redis.conf and redis.log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the server has logged (all runs).
    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }

    /// Whether the server process is running (started and not stopped or killed).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server (SIGTERM, its graceful shutdown) and waits for it to
    /// exit. Does nothing if it is not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, crate::Signal::TERM);
        }
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped or killed server again: the same port, directory
    /// and configuration (and no data: it persists none).
    pub fn start_again(&mut self) {
        assert!(
            !self.is_running(),
            "start_again: redis-server on port {} is still running",
            self.port
        );
        self.spawn();
    }

    /// The number of clients connected to the server, not counting the
    /// connection that asks (`CLIENT LIST`).
    pub fn client_count(&self) -> usize {
        self.client_ids().len()
    }

    /// The ids of the clients connected to the server (`CLIENT LIST`), not
    /// counting the connection that asks: the same id is the same connection.
    pub fn client_ids(&self) -> Vec<u64> {
        let list = match self.command(&["CLIENT", "LIST"]) {
            RedisReply::Bulk(list) => String::from_utf8_lossy(&list).into_owned(),
            other => panic!("CLIENT LIST answered {other:?}"),
        };
        // The asking connection is the newest: the highest id.
        let mut ids: Vec<u64> = list
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(|id| id.parse().expect("a client id"))
            .collect();
        ids.sort_unstable();
        ids.pop();
        ids
    }

    /// Changes the server's password (`CONFIG SET requirepass`); connections
    /// already open stay authenticated, new ones need the new password.
    pub fn change_password(&mut self, password: &str) {
        self.command(&["CONFIG", "SET", "requirepass", password]);
        self.password = Some(password.to_string());
    }

    /// Sends one command on a fresh connection (authenticated if the server
    /// has a password) and returns the reply; for fixtures and checks.
    pub fn command(&self, args: &[&str]) -> RedisReply {
        let mut conn =
            Connection::open(self.addr(), self.password.as_deref()).unwrap_or_else(|err| {
                panic!("connecting to redis-server on port {}: {err}", self.port)
            });
        conn.command(args)
            .unwrap_or_else(|err| panic!("redis command {args:?}: {err}"))
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Starts redis-server and waits until it answers PING.
    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening redis.log");
        let log_err = log.try_clone().expect("duplicating the redis.log handle");
        let child = Command::new("redis-server")
            .arg(self.dir.path().join("redis.conf"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot run redis-server ({err}): install it with scripts/install-deps.sh")
            });
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.child.as_mut().unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                panic!(
                    "redis-server on port {} exited with {status} while starting; its log:\n{}",
                    self.port,
                    self.log()
                );
            }
            let last_error = match ping(self.addr(), self.password.as_deref()) {
                Ok(()) => return,
                Err(err) => err,
            };
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "redis-server on port {} did not answer PING within {:?} ({last_error}); its log:\n{}",
                    self.port,
                    START_TIMEOUT,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A redis.conf string argument.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn ping(addr: SocketAddr, password: Option<&str>) -> io::Result<()> {
    let mut conn = Connection::open(addr, password)?;
    match conn.command(&["PING"])? {
        RedisReply::Simple(pong) if pong == "PONG" => Ok(()),
        other => Err(io::Error::other(format!("PING answered {other:?}"))),
    }
}

/// A raw RESP2 connection over a std TcpStream.
struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    fn open(addr: SocketAddr, password: Option<&str>) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let mut conn = Connection {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        if let Some(password) = password {
            match conn.command(&["AUTH", password])? {
                RedisReply::Simple(ok) if ok == "OK" => {}
                other => return Err(io::Error::other(format!("AUTH answered {other:?}"))),
            }
        }
        Ok(conn)
    }

    fn command(&mut self, args: &[&str]) -> io::Result<RedisReply> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&request)?;
        read_reply(&mut self.reader)
    }
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<RedisReply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad RESP line {line:?}"),
        )
    };
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    let number = || rest.parse::<i64>().map_err(|_| bad());
    Ok(match kind {
        "+" => RedisReply::Simple(rest.to_owned()),
        "-" => RedisReply::Error(rest.to_owned()),
        ":" => RedisReply::Integer(number()?),
        "$" if number()? < 0 => RedisReply::Nil,
        "$" => {
            let mut data = vec![0; number()? as usize + 2];
            reader.read_exact(&mut data)?;
            data.truncate(data.len() - 2);
            RedisReply::Bulk(data)
        }
        "*" if number()? < 0 => RedisReply::Nil,
        "*" => RedisReply::Array(
            (0..number()?)
                .map(|_| read_reply(reader))
                .collect::<io::Result<_>>()?,
        ),
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let mut input: &[u8] = b"*4\r\n+OK\r\n:-3\r\n$5\r\nhe\r\no\r\n$-1\r\n-ERR no\r\n";
        assert_eq!(
            read_reply(&mut input).unwrap(),
            RedisReply::Array(vec![
                RedisReply::Simple("OK".into()),
                RedisReply::Integer(-3),
                RedisReply::Bulk(b"he\r\no".to_vec()),
                RedisReply::Nil,
            ])
        );
        assert_eq!(
            read_reply(&mut input).unwrap(),
            RedisReply::Error("ERR no".into())
        );
        assert!(read_reply(&mut input).is_err());
    }

    #[test]
    fn config_strings_are_quoted() {
        assert_eq!(quote(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    }
}
