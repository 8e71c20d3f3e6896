//! `memory.stat` key names, interned once: which keys exist differs between kernels (and
//! configs), so they are learnt from the files rather than listed in code.

use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct StatKeys {
    names: Arc<Vec<Box<str>>>,
    index: HashMap<Box<str>, u32>,
}

impl StatKeys {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }

    pub fn get(&self, key: &str) -> Option<u32> {
        self.index.get(key).copied()
    }

    /// The index of `key`, adding it the first time it is seen (the only allocation).
    pub fn intern(&mut self, key: &str) -> u32 {
        if let Some(i) = self.get(key) {
            return i;
        }
        let i = self.names.len() as u32;
        Arc::make_mut(&mut self.names).push(key.into());
        self.index.insert(key.into(), i);
        i
    }

    /// The names, shared with snapshots (cloned only when a new key has been added since).
    pub fn shared(&self) -> Arc<Vec<Box<str>>> {
        Arc::clone(&self.names)
    }
}

/// The position of each key in the last `memory.stat` read of one cgroup: the kernel prints
/// keys in a fixed order, so the common case is one string compare per line, no hashing.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyOrder(Vec<u32>);

impl KeyOrder {
    pub(crate) fn resolve(&mut self, keys: &mut StatKeys, line: usize, key: &str) -> u32 {
        if let Some(&i) = self.0.get(line) {
            if (i as usize) < keys.len() && keys.name(i) == key {
                return i;
            }
        }
        let i = keys.intern(key);
        if line < self.0.len() {
            self.0[line] = i;
        } else {
            self.0.resize(line, u32::MAX);
            self.0.push(i);
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_and_order_cache() {
        let mut keys = StatKeys::default();
        let mut order = KeyOrder::default();
        assert_eq!(order.resolve(&mut keys, 0, "anon"), 0);
        assert_eq!(order.resolve(&mut keys, 1, "file"), 1);
        let shared = keys.shared();
        // Same order again: no new keys.
        assert_eq!(order.resolve(&mut keys, 0, "anon"), 0);
        assert_eq!(order.resolve(&mut keys, 1, "file"), 1);
        assert_eq!(keys.len(), 2);
        // A kernel (or cgroup) with a different key at a line: re-resolved, old Arc untouched.
        assert_eq!(order.resolve(&mut keys, 1, "zswap"), 2);
        assert_eq!(order.resolve(&mut keys, 2, "file"), 1);
        assert_eq!(shared.len(), 2);
        assert_eq!(&*keys.shared()[2], "zswap");
    }
}
