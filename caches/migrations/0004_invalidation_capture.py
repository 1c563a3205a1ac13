"""Triggers on every table a cache layer reads record its changes in the outbox.

The triggers are derived from the layers' `feeds` declarations
(`caches.outbox.capture`); every later `migrate` refreshes them too (a
post_migrate receiver), so they follow the declarations.
"""

from django.db import migrations, models


def install(apps, schema_editor):
    from caches.outbox import capture

    capture.sync(schema_editor.connection)


def uninstall(apps, schema_editor):
    from caches.outbox import capture

    capture.drop_all(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("caches", "0003_invalidation_outbox"),
        ("tomori", "0003_input_rules"),
    ]

    operations = [
        migrations.AddField(
            model_name="invalidationoutbox",
            name="tx",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="invalidationoutbox",
            index=models.Index(
                condition=models.Q(tx__isnull=False), fields=["tx"], name="outbox_tx"
            ),
        ),
        migrations.RunPython(install, uninstall),
    ]
