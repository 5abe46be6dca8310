//! The published packages carry the license texts and a README: `cargo package` and maturin take only files inside
//! a package's directory (symlinks to the root are not reliably followed), so layout/, host/ and python/ hold
//! copies of the root's LICENSE-MIT and LICENSE-APACHE, which must stay equal to them; and each published manifest
//! names its README and the license the copies carry.

use std::fs;
use std::path::{Path, PathBuf};

/// The repository root (this crate is tests/).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The published packages: the two crates and the Python package.
const PACKAGES: [&str; 3] = ["layout", "host", "python"];
const LICENSES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn license_copies_equal_the_root_files() {
    let root = root();
    for license in LICENSES {
        let original = read(&root.join(license));
        for package in PACKAGES {
            let copy = root.join(package).join(license);
            let meta = fs::symlink_metadata(&copy).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
            assert!(meta.file_type().is_file(), "{} must be a regular file (a copy), not a link", copy.display());
            assert!(
                read(&copy) == original,
                "{} differs from the root's {license}: copy the root file over it",
                copy.display()
            );
        }
    }
}

#[test]
fn license_texts_are_the_standard_ones() {
    let root = root();
    let mit = read(&root.join("LICENSE-MIT"));
    assert!(mit.starts_with("MIT License\n\nCopyright (c) 2026 The sparsek developers\n"), "LICENSE-MIT's header");
    assert!(mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND"));
    let apache = read(&root.join("LICENSE-APACHE"));
    assert!(apache.contains("Apache License\n                        Version 2.0, January 2004"));
    assert!(apache.contains("END OF TERMS AND CONDITIONS"));
}

#[test]
fn published_manifests_name_readme_and_license() {
    let root = root();
    let workspace = read(&root.join("Cargo.toml"));
    assert!(workspace.contains("\nlicense = \"MIT OR Apache-2.0\"\n"), "the workspace's license");
    for package in ["layout", "host"] {
        let manifest = read(&root.join(package).join("Cargo.toml"));
        assert!(manifest.contains("\nlicense.workspace = true\n"), "{package}/Cargo.toml: license.workspace");
        assert!(manifest.contains("\nreadme = \"README.md\"\n"), "{package}/Cargo.toml: readme");
        assert!(!manifest.contains("\npublish = false"), "{package} is published");
        assert!(root.join(package).join("README.md").is_file(), "{package}/README.md");
    }
    let pyproject = read(&root.join("python").join("pyproject.toml"));
    assert!(pyproject.contains("\nlicense = \"MIT OR Apache-2.0\"\n"), "pyproject.toml: PEP 639 license");
    assert!(
        pyproject.contains("license-files = [\"LICENSE-MIT\", \"LICENSE-APACHE\"]"),
        "pyproject.toml: license-files"
    );
}
