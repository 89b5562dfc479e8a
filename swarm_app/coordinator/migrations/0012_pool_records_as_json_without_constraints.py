"""The pool's records as ``json`` on PostgreSQL, and its rows without foreign-key constraints.

See models.PoolRollout and models.JSONTextField for why. Changing the column's type rewrites it
and resets its compression to the server's default, so lz4 is set again (migration 0011's step),
after the change and, going back to 0011, after the change back to jsonb (the first operation,
which is the last one run backwards).
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

import swarm_app.coordinator.models

lz4 = importlib.import_module("swarm_app.coordinator.migrations.0011_pool_records_lz4")


class Migration(migrations.Migration):

    dependencies = [
        ('campaigns', '0007_round_units'),
        ('coordinator', '0011_pool_records_lz4'),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, lz4.records_in_lz4),
        migrations.AlterField(
            model_name='poolrollout',
            name='campaign',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollouts', to='campaigns.campaign'),
        ),
        migrations.AlterField(
            model_name='poolrollout',
            name='lease',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollouts', to='coordinator.lease'),
        ),
        migrations.AlterField(
            model_name='poolrollout',
            name='node',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollouts', to='coordinator.workernode'),
        ),
        migrations.AlterField(
            model_name='poolrollout',
            name='record',
            field=swarm_app.coordinator.models.JSONTextField(help_text='the Rollout record with verified rewards and advantages'),
        ),
        migrations.RunPython(lz4.records_in_lz4, migrations.RunPython.noop),
    ]
