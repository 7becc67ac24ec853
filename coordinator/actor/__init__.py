"""Lane actors: one mailbox per lane, group commit, the alarm, and long-poll waiters."""
