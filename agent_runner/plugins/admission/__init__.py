"""Admission at boot: discover installed plugins, judge provenance and pins, admit or refuse."""
