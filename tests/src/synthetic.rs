//! Large documents made in code, for the tests and benches that need sizes no committed
//! file should have: a PDF of many pages of text with an embedded image (what makes real
//! PDFs large), and a Word file of many paragraphs with a picture. Each page (or every
//! tenth paragraph) starts with a sentence naming its number, so a test can tell where a
//! passage came from.
use std::io::Write as _;

/// The sentence page `number` starts with.
pub fn page_marker(number: usize) -> String {
    format!("Page {number} begins here.")
}

/// A PDF of `pages` pages, each with `lines` lines of text (Helvetica, uncompressed), and
/// an image of `padding` random bytes on the first page. Readers find every object
/// through the cross-reference table this writes.
pub fn pdf(pages: usize, lines: usize, padding: usize) -> Vec<u8> {
    let mut objects: Vec<Vec<u8>> = Vec::new();
    // 1 catalog, 2 page tree, 3 font, 4 image; then per page: the page and its content.
    objects.push(b"<< /Type /Catalog /Pages 2 0 R >>".to_vec());
    let kids: Vec<String> = (0..pages).map(|page| format!("{} 0 R", 5 + page * 2)).collect();
    objects.push(format!("<< /Type /Pages /Kids [{}] /Count {pages} >>", kids.join(" ")).into_bytes());
    objects.push(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec());
    let mut image = vec![0u8; padding];
    rand::fill(&mut image[..]);
    let side = ((padding / 3) as f64).sqrt().max(1.0) as usize;
    let mut image_object = format!(
        "<< /Type /XObject /Subtype /Image /Width {side} /Height {} /ColorSpace /DeviceRGB /BitsPerComponent 8 /Length {padding} >>\nstream\n",
        (padding / 3 / side).max(1)
    )
    .into_bytes();
    image_object.extend_from_slice(&image);
    image_object.extend_from_slice(b"\nendstream");
    objects.push(image_object);
    for page in 1..=pages {
        let mut text = format!("BT /F1 10 Tf 40 760 Td 12 TL ({}) Tj\n", page_marker(page));
        for line in 1..lines {
            text.push_str(&format!(
                "T* (Line {line} of page {page} says the tide rises and falls twice a day near harbour {page}.) Tj\n"
            ));
        }
        text.push_str("ET");
        let resources = if page == 1 { "/XObject << /Im1 4 0 R >> " } else { "" };
        let content_id = 6 + (page - 1) * 2;
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> {resources}>> /Contents {content_id} 0 R >>"
            )
            .into_bytes(),
        );
        let mut content = format!("<< /Length {} >>\nstream\n", text.len()).into_bytes();
        content.extend_from_slice(text.as_bytes());
        content.extend_from_slice(b"\nendstream");
        objects.push(content);
    }
    pdf_of(&objects)
}

/// A PDF of `objects` (numbered from 1; the first is the catalog), with the
/// cross-reference table and trailer readers find them through.
pub fn pdf_of(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", index + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes(),
    );
    out
}

/// A Word file of `paragraphs` paragraphs under a heading every hundred, with a picture of
/// `padding` random bytes (stored, not compressed, as pictures are).
pub fn docx(paragraphs: usize, padding: usize) -> anyhow::Result<Vec<u8>> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    archive.start_file("[Content_Types].xml", deflated)?;
    archive.write_all(
        br#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#,
    )?;
    archive.start_file("word/document.xml", deflated)?;
    archive.write_all(br#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>"#)?;
    for paragraph in 0..paragraphs {
        if paragraph % 100 == 0 {
            let section = paragraph / 100 + 1;
            write!(
                archive,
                r#"<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Section {section}</w:t></w:r></w:p>"#
            )?;
        }
        write!(
            archive,
            "<w:p><w:r><w:t>Paragraph {paragraph} says the tide rises and falls twice a day near harbour {paragraph}, and the moon pulls the sea.</w:t></w:r></w:p>"
        )?;
    }
    archive.write_all(b"</w:body></w:document>")?;
    archive.start_file("word/media/image1.png", stored)?;
    let mut image = vec![0u8; padding];
    rand::fill(&mut image[..]);
    archive.write_all(&image)?;
    Ok(archive.finish()?.into_inner())
}
