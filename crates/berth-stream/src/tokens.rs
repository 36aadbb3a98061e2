//! Single-use, expiring tokens naming a prepared exec, attach or
//! port-forward request: the last path segment of the URLs the CRI handlers
//! hand out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{AttachSpec, ExecSpec};

/// At most this many unused tokens at once, as kubelet's request cache.
const MAX_IN_FLIGHT: usize = 1000;
/// 128 random bits.
const TOKEN_BYTES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Exec(ExecSpec),
    Attach(AttachSpec),
    PortForward { pod_sandbox_id: String },
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("too many streaming requests in flight ({MAX_IN_FLIGHT}); try again later")]
    TooMany,
    #[error("no randomness for a streaming token: {0}")]
    Random(String),
}

pub struct TokenCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Request)>>,
}

impl TokenCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Stores `request` under a fresh random token.
    pub fn insert(&self, request: Request) -> Result<String, TokenError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
        let token = hex::encode(bytes);
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (expires, _)| *expires > now);
        if entries.len() >= MAX_IN_FLIGHT {
            return Err(TokenError::TooMany);
        }
        entries.insert(token.clone(), (now + self.ttl, request));
        Ok(token)
    }

    /// Takes the request behind `token` out of the cache: a token works
    /// once, and not after it expired.
    pub fn consume(&self, token: &str) -> Option<Request> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (expires, request) = entries.remove(token)?;
        (expires > Instant::now()).then_some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf() -> Request {
        Request::PortForward {
            pod_sandbox_id: "p".into(),
        }
    }

    #[test]
    fn tokens_are_random_and_single_use() {
        let cache = TokenCache::new(Duration::from_secs(60));
        let a = cache.insert(pf()).unwrap();
        let b = cache.insert(pf()).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 2 * TOKEN_BYTES);
        assert_eq!(cache.consume(&a), Some(pf()));
        assert_eq!(cache.consume(&a), None);
        assert_eq!(cache.consume("unknown"), None);
        assert_eq!(cache.consume(&b), Some(pf()));
    }

    #[test]
    fn expired_tokens_are_gone() {
        let cache = TokenCache::new(Duration::ZERO);
        let a = cache.insert(pf()).unwrap();
        assert_eq!(cache.consume(&a), None);
    }
}
