//! The `capstan` binary's global allocator: mimalloc, called the way its fast paths expect.
//!
//! Rendering allocates many small strings and maps on every core; glibc's malloc cost ~30%
//! of a 1,000-cluster render (bench/README.md), so the binary uses mimalloc. The `mimalloc`
//! crate's allocator passes every request to `mi_malloc_aligned`, and mimalloc v3 takes
//! that function's plain path only when a free block of the size class happens to be
//! aligned already; otherwise (and for any size class that is not a power of two, such as
//! 24 or 48 bytes) it over-allocates on a slow path. That cost ~4% of the instructions of
//! a render (callgrind; the upstream report is purpleprotocol/mimalloc_rust#170).
//!
//! Here a request whose alignment is at most 16 bytes (nearly all of them) goes to the
//! plain `mi_malloc` family, and the pointer it returns is checked: one that does not
//! meet the alignment (mimalloc's size classes make that not happen, but nothing here
//! relies on it) is given back and the request is served by the `_aligned` function.
//! Every block is freed with `mi_free`, which accepts blocks from either family.
//! Transparent huge pages stay off (the `no_thp` feature), which keeps peak memory where
//! glibc's was.
//!
//! This is the only unsafe code in capstan; the library forbids it.
#![allow(unsafe_code)]

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// Alignments up to this are worth trying with the plain functions (mimalloc's
/// `MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN_MAX: usize = 16;

/// mimalloc, plain functions first (see the module documentation).
pub struct Mimalloc;

fn aligned(p: *mut c_void, align: usize) -> bool {
    (p as usize) & (align - 1) == 0
}

/// A block from `plain` when the layout's alignment allows and the pointer meets it,
/// otherwise from `aligned_fn` (a pair of mimalloc's allocation functions, zeroing or not).
#[inline]
fn plain_first(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned_fn: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    let (size, align) = (layout.size(), layout.align());
    if align <= PLAIN_ALIGN_MAX {
        // SAFETY: mimalloc's allocation functions have no preconditions.
        let p = unsafe { plain(size) };
        if p.is_null() || aligned(p, align) {
            return p.cast();
        }
        // SAFETY: `p` came from mimalloc and is not used again.
        unsafe { mi::mi_free(p) };
    }
    // SAFETY: `align` is a power of two (a `Layout` invariant).
    unsafe { aligned_fn(size, align) }.cast()
}

// SAFETY: every method returns null or a block of at least `layout.size()` bytes aligned
// to `layout.align()` (checked on the plain path, guaranteed by mimalloc on the `_aligned`
// one), and every block comes from mimalloc, so `mi_free` may free it.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        plain_first(layout, mi::mi_malloc, mi::mi_malloc_aligned)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        plain_first(layout, mi::mi_zalloc, mi::mi_zalloc_aligned)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned, once.
        unsafe { mi::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        if align > PLAIN_ALIGN_MAX {
            // SAFETY: `ptr` is a live block of this allocator; `align` is a power of two.
            return unsafe { mi::mi_realloc_aligned(ptr.cast(), new_size, align) }.cast();
        }
        // SAFETY: `ptr` is a live block of this allocator. On failure it stays valid and
        // null is returned, as `GlobalAlloc::realloc` requires.
        let p = unsafe { mi::mi_realloc(ptr.cast(), new_size) };
        if p.is_null() || aligned(p, align) {
            return p.cast();
        }
        // The block moved to a misaligned address: copy it to an aligned one.
        // SAFETY: `align` is a power of two.
        let q = unsafe { mi::mi_malloc_aligned(new_size, align) };
        if !q.is_null() {
            // SAFETY: `p` holds at least min(old, new) initialised bytes, `q` has room for
            // `new_size`, and the two blocks are distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.cast::<u8>(),
                    q.cast::<u8>(),
                    layout.size().min(new_size),
                )
            };
        }
        // SAFETY: `p` is the live block mi_realloc returned; on success its contents were
        // copied to `q`. On failure the contents are lost with it, so say so loudly rather
        // than return a block the caller believes is the old one.
        unsafe { mi::mi_free(p) };
        if q.is_null() {
            std::alloc::handle_alloc_error(
                Layout::from_size_align(new_size, align).unwrap_or(layout),
            );
        }
        q.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_zeroed_and_keep_their_contents() {
        let a = Mimalloc;
        let mut live = Vec::new();
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 7, 8, 9, 16, 24, 40, 48, 100, 1000, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed below with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null() && aligned(p.cast(), align), "{size}/{align}");
                    p.write_bytes(0xab, size);
                    let z = a.alloc_zeroed(layout);
                    assert!(!z.is_null() && aligned(z.cast(), align), "{size}/{align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    let grown = a.realloc(p, layout, size * 3);
                    assert!(aligned(grown.cast(), align), "{size}/{align} grown");
                    assert!(std::slice::from_raw_parts(grown, size)
                        .iter()
                        .all(|&b| b == 0xab));
                    let big = Layout::from_size_align(size * 3, align).unwrap();
                    let shrunk = a.realloc(grown, big, size / 2 + 1);
                    assert!(aligned(shrunk.cast(), align), "{size}/{align} shrunk");
                    assert!(std::slice::from_raw_parts(shrunk, size / 2 + 1)
                        .iter()
                        .all(|&b| b == 0xab));
                    live.push((
                        shrunk,
                        Layout::from_size_align(size / 2 + 1, align).unwrap(),
                    ));
                    live.push((z, layout));
                }
            }
        }
        for (p, layout) in live {
            // SAFETY: each block is live and freed once, with the layout it has.
            unsafe { a.dealloc(p, layout) };
        }
    }
}
