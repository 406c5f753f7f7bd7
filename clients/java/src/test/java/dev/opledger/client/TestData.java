package dev.opledger.client;

import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** TestData reads the shared vectors in clients/go/fingerprint/testdata. */
final class TestData {
  private TestData() {}

  static Path dir() {
    return Path.of(System.getProperty("opledger.testdata", "../go/fingerprint/testdata"));
  }

  /** Vectors parses a vectors file; JSON numbers become doubles, as in a Struct on the wire. */
  static List<Value> vectors(String file) throws IOException {
    Struct root = Args.fromJson(Files.readString(dir().resolve(file), StandardCharsets.UTF_8));
    return root.getFieldsOrThrow("vectors").getListValue().getValuesList();
  }

  static String str(Value v, String field) {
    return v.getStructValue().getFieldsOrThrow(field).getStringValue();
  }
}
