"""What the C kernels (lazystore/codecs/_kernels.c) refuse, through their
Python binding: an output that overlaps a plane, planes and output whose
lengths disagree or overflow, and a list of planes that changes while the
kernel asks its items for their bytes. Each would otherwise write out of
bounds or read freed memory, so a regression crashes the run."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from lazystore.codecs import compiled

kernels = compiled.kernels
pytestmark = pytest.mark.skipif(kernels is None, reason="the C kernels are not built here")
BOTH = pytest.mark.parametrize("kernel", ["unshuffle", "add_unzigzag"])


def huge(nbytes: int, anchor) -> ctypes.Array:
    """A buffer that claims ``nbytes`` bytes at ``anchor``'s address, without
    allocating them: only a refusal keeps the kernel from touching them."""
    return (ctypes.c_char * nbytes).from_address(ctypes.addressof(anchor))


@BOTH
@pytest.mark.parametrize(
    ("planes_at", "out_at"),
    [
        ((0, 4), (4, 12)),  # the output starts inside the second plane
        ((8, 12), (6, 14)),  # both planes inside the output
        ((0, 4), (3, 11)),  # one byte shared at the end of the first plane
        ((0, 4), (0, 8)),  # the output is where the planes start
    ],
)
def test_refuses_an_output_over_a_plane(kernel, planes_at, out_at):
    memory = np.arange(32, dtype=np.uint8)
    before = memory.copy()
    planes = [memory[start : start + 4] for start in planes_at]
    with pytest.raises(ValueError, match="overlaps plane"):
        getattr(kernels, kernel)(planes, memory[out_at[0] : out_at[1]])
    np.testing.assert_array_equal(memory, before)  # refused before writing anything


@BOTH
def test_planes_just_beside_the_output_are_fine(kernel):
    memory = np.arange(24, dtype=np.uint8)
    first, second = memory[0:4].copy(), memory[12:16].copy()
    getattr(kernels, kernel)([memory[0:4], memory[12:16]], memory[4:12])
    expected = np.stack([first, second], axis=1).reshape(-1)
    if kernel == "add_unzigzag":
        z = expected.view(np.uint16)
        expected = (np.arange(4, 12, dtype=np.uint8).view(np.uint16) + ((z >> 1) ^ -(z & 1))).view(np.uint8)
    np.testing.assert_array_equal(memory[4:12], expected)


def test_an_empty_output_overlaps_nothing():
    memory = np.zeros(8, dtype=np.uint8)
    kernels.unshuffle([memory[2:2], memory[2:2]], memory[2:2])


@BOTH
@pytest.mark.parametrize("planes", [2, 4, 8])
def test_refuses_lengths_whose_product_overflows(kernel, planes):
    # 2^62 bytes a plane: 2, 4 or 8 planes of it are 2^63 bytes or more, which
    # wraps a signed size to a negative or zero one. A zero-byte output must not
    # then pass as the right size and be written 2^62 elements into.
    anchor = ctypes.create_string_buffer(16)
    with pytest.raises(OverflowError, match="more bytes than a buffer holds"):
        getattr(kernels, kernel)([huge(1 << 62, anchor)] * planes, np.empty(0, dtype=np.uint8))


def test_refuses_a_huge_plane_against_a_small_output():
    anchor = ctypes.create_string_buffer(16)
    with pytest.raises(ValueError, match="into 8 bytes"):
        kernels.unshuffle([huge(1 << 62, anchor)], np.empty(8, dtype=np.uint8))


@BOTH
def test_refuses_planes_of_mismatched_lengths(kernel):
    with pytest.raises(ValueError, match="differ in length"):
        getattr(kernels, kernel)([b"abcd", b"abc"], np.empty(8, dtype=np.uint8))
    with pytest.raises(ValueError, match="2 planes of 4 bytes into 9 bytes"):
        getattr(kernels, kernel)([b"abcd", b"abcd"], np.empty(9, dtype=np.uint8))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python class provides a buffer from 3.12 (PEP 688)")
def test_a_list_emptied_while_its_planes_are_asked_for():
    # Asking a plane for its buffer can run Python code, here a __buffer__
    # method that empties the very list the kernel is walking. The kernel
    # works from its own copy of the list: it un-shuffles the planes the call
    # was given, and no item is read after the list let go of it.
    planes: list = []

    class Emptying:
        def __buffer__(self, flags):
            planes.clear()
            return memoryview(b"\x01\x02\x03")

    planes.extend([Emptying(), bytes([4, 5, 6]), bytes([7, 8, 9])])
    out = np.empty(9, dtype=np.uint8)
    kernels.unshuffle(planes, out)
    assert planes == []
    np.testing.assert_array_equal(out, [1, 4, 7, 2, 5, 8, 3, 6, 9])


def test_an_iterable_of_planes_is_taken_whole():
    out = np.empty(4, dtype=np.uint8)
    kernels.unshuffle((plane for plane in [b"ab", b"cd"]), out)
    np.testing.assert_array_equal(out, list(b"acbd"))
