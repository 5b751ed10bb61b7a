//! A bounded, insertion-ordered set of remembered request ids.
//!
//! Sessions remember ids for a while after the request they named is gone:
//! the client remembers cancelled ids so a late response is ignored (G6), the
//! server remembers ids whose response started so a late cancel is recorded
//! rather than acted on (G7), and the proxy remembers cancelled ids so a late
//! response never reaches the host. None of them may grow without bound, and
//! all of them forget the oldest id first. This type is that rule, once.

use std::collections::{HashSet, VecDeque};

use crate::wire::message::Id;

/// A set of at most [`limit`](Self::limit) ids; inserting past the limit
/// forgets the oldest.
///
/// Worst-case memory: `limit × 2 × (≈ 32 B + the longest id's bytes)` (each id
/// is kept twice: in the set and in the insertion order). Ids arrive inside
/// frames, so an id is never longer than the wire limit; with numeric ids or
/// short strings a limit of 1024 is ≈ 64 KiB.
#[derive(Debug, Clone)]
pub struct RecentIds {
    set: HashSet<Id>,
    order: VecDeque<Id>,
    limit: usize,
}

impl RecentIds {
    /// An empty set that keeps at most `limit` ids (0 keeps none).
    pub fn new(limit: usize) -> Self {
        Self {
            set: HashSet::new(),
            order: VecDeque::new(),
            limit,
        }
    }

    /// The most ids kept.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Ids kept now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when no id is kept.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// True while `id` is remembered.
    pub fn contains(&self, id: &Id) -> bool {
        self.set.contains(id)
    }

    /// Remembers `id` (as the newest, unless it already was remembered) and
    /// forgets the oldest ids past the limit. Returns true if `id` was new.
    pub fn insert(&mut self, id: Id) -> bool {
        if self.limit == 0 || self.set.contains(&id) {
            return false;
        }
        self.set.insert(id.clone());
        self.order.push_back(id);
        while self.order.len() > self.limit {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    /// Forgets `id`; returns true if it was remembered. Linear in
    /// [`len`](Self::len): meant for the rare reuse of a remembered id.
    pub fn remove(&mut self, id: &Id) -> bool {
        if !self.set.remove(id) {
            return false;
        }
        self.order.retain(|kept| kept != id);
        true
    }

    /// Remembered ids, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Id> + '_ {
        self.order.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(i: i64) -> Id {
        Id::Number(i)
    }

    #[test]
    fn forgets_the_oldest_past_the_limit() {
        let mut s = RecentIds::new(3);
        for i in 0..5 {
            assert!(s.insert(n(i)));
        }
        assert_eq!(s.len(), 3);
        assert!(!s.contains(&n(0)) && !s.contains(&n(1)));
        assert_eq!(s.iter().cloned().collect::<Vec<_>>(), [n(2), n(3), n(4)]);
    }

    #[test]
    fn a_repeated_insert_keeps_the_first_position() {
        let mut s = RecentIds::new(2);
        s.insert(n(1));
        s.insert(n(2));
        assert!(!s.insert(n(1)));
        s.insert(n(3));
        assert!(!s.contains(&n(1)), "1 was the oldest");
        assert!(s.contains(&n(2)) && s.contains(&n(3)));
    }

    #[test]
    fn remove_then_insert_makes_it_the_newest() {
        let mut s = RecentIds::new(2);
        s.insert(n(1));
        s.insert(n(2));
        assert!(s.remove(&n(1)));
        assert!(!s.remove(&n(1)));
        s.insert(n(1));
        s.insert(n(3));
        assert!(!s.contains(&n(2)));
        assert!(s.contains(&n(1)) && s.contains(&n(3)));
    }

    #[test]
    fn limit_zero_keeps_nothing() {
        let mut s = RecentIds::new(0);
        assert!(!s.insert(n(1)));
        assert!(s.is_empty() && !s.contains(&n(1)));
    }

    proptest! {
        /// The set agrees with a naive model: the last `limit` distinct insertions, in order.
        #[test]
        fn matches_a_naive_model(limit in 0usize..6, ops in prop::collection::vec((any::<bool>(), 0i64..8), 0..64)) {
            let mut s = RecentIds::new(limit);
            let mut model: Vec<i64> = Vec::new();
            for (insert, i) in ops {
                if insert {
                    if limit > 0 && !model.contains(&i) {
                        model.push(i);
                        if model.len() > limit {
                            model.remove(0);
                        }
                    }
                    s.insert(n(i));
                } else {
                    model.retain(|&m| m != i);
                    s.remove(&n(i));
                }
                prop_assert!(s.len() <= limit);
                prop_assert_eq!(s.iter().cloned().collect::<Vec<_>>(), model.iter().map(|&i| n(i)).collect::<Vec<_>>());
                for i in 0..8 {
                    prop_assert_eq!(s.contains(&n(i)), model.contains(&i));
                }
            }
        }
    }
}
