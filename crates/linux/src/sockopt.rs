//! Thin, checked wrappers around `setsockopt(2)`/`getsockopt(2)`.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Sets a socket option whose value is a plain-old-data `T`.
pub(crate) fn set<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is a live descriptor for the borrow's duration; `val`
    // points to `size_of::<T>()` initialised bytes that the kernel only reads.
    let rc =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (val as *const T).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets an option from a byte buffer (e.g. an interface name).
pub(crate) fn set_bytes(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &[u8],
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(val.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is live; `val` is a valid slice of `len` bytes that the
    // kernel only reads.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, val.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Types for which every bit pattern, including all zeros, is a valid value,
/// so the kernel may write any bytes into them.
///
/// # Safety
/// Implement only for integers, arrays of them, and `#[repr(C)]` structs
/// made solely of such fields.
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: a C int accepts every bit pattern.
unsafe impl Pod for libc::c_int {}
// SAFETY: a byte array accepts every bit pattern.
unsafe impl<const N: usize> Pod for [u8; N] {}

/// Reads an option into a zero-initialised `T` and returns it together with
/// the number of bytes the kernel filled in.
pub(crate) fn get<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    let mut val = MaybeUninit::<T>::zeroed();
    let mut len = libc::socklen_t::try_from(size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is live; `val` is writable for `len` bytes and `len` is a
    // valid in/out length pointer.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            val.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the buffer was zero-initialised and `T: Pod`, so all-zero and
    // any bytes the kernel wrote form a valid `T`.
    Ok((unsafe { val.assume_init() }, len as usize))
}

pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    set(fd, level, name, &val)
}

pub(crate) fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    get::<libc::c_int>(fd, level, name).map(|(v, _)| v)
}

/// The socket's address family (`SO_DOMAIN`): `AF_INET` or `AF_INET6`.
pub(crate) fn domain(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)
}
