//! The permission bits of the gRPC unix socket (`--grpc-uds-mode`): who on the host may connect.
//!
//! Connecting to a unix socket needs write permission on its file, and a file created by `bind`
//! gets `0777` minus the process umask: under umask `000` every local user could ask for
//! decisions (and hold connections). The mode is therefore set explicitly, before the socket
//! listens, whatever the umask.

use std::fmt;

/// Permission bits for the socket file (`0o660` by default: its owner and group may connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdsMode(u32);

impl UdsMode {
    /// Owner and group read and write, nobody else.
    pub const DEFAULT: UdsMode = UdsMode(0o660);

    /// The mode of an octal permission string (`0660`, `660`, `0o660`), at most `0777`: set-id
    /// and sticky bits mean nothing on a socket and are refused rather than dropped.
    pub fn parse(text: &str) -> Result<UdsMode, String> {
        let digits = text.strip_prefix("0o").unwrap_or(text);
        let not_octal = || format!("`{text}` is not an octal mode such as 0660");
        if digits.is_empty() || !digits.bytes().all(|b| matches!(b, b'0'..=b'7')) {
            return Err(not_octal());
        }
        let bits = u32::from_str_radix(digits, 8).map_err(|_| not_octal())?;
        if bits > 0o777 {
            return Err(format!(
                "`{text}` is not a permission mode between 0000 and 0777"
            ));
        }
        Ok(UdsMode(bits))
    }

    /// The bits, for `chmod`.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl Default for UdsMode {
    fn default() -> UdsMode {
        UdsMode::DEFAULT
    }
}

impl fmt::Display for UdsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_modes_with_or_without_a_prefix() {
        assert_eq!(UdsMode::parse("0660"), Ok(UdsMode(0o660)));
        assert_eq!(UdsMode::parse("600"), Ok(UdsMode(0o600)));
        assert_eq!(UdsMode::parse("0o666"), Ok(UdsMode(0o666)));
        assert_eq!(UdsMode::parse("0"), Ok(UdsMode(0)));
        assert_eq!(UdsMode::DEFAULT.to_string(), "0660");
    }

    #[test]
    fn decimal_digits_bits_beyond_permissions_and_empty_text_are_refused() {
        assert_eq!(
            UdsMode::parse("0689"),
            Err("`0689` is not an octal mode such as 0660".to_owned())
        );
        assert_eq!(
            UdsMode::parse("4755"),
            Err("`4755` is not a permission mode between 0000 and 0777".to_owned())
        );
        assert!(UdsMode::parse("").is_err());
        assert!(UdsMode::parse("0o").is_err());
        assert!(UdsMode::parse("-1").is_err());
        assert!(UdsMode::parse("+660").is_err());
    }
}
