//! Lines for a person, written so that a closed or broken stdout or stderr never stops the
//! engine: `std`'s `println!`/`eprintln!` panic when the write fails (a `keel run | head`, a
//! terminal gone, a log pipe whose reader died), and a panic in a loop thread would stop
//! trading with orders open. These lose the line instead; nothing else.

/// One line on stderr (warnings, status); a failed write is ignored.
#[macro_export]
macro_rules! warn_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// One line on stdout (reports); a failed write is ignored.
#[macro_export]
macro_rules! say_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
